package tables

import (
	"bytes"
	"context"
	"encoding/csv"
	"io"
)

// SheetCopy is one sheet of a workbook written as CSV.
type SheetCopy struct {
	Sheet string
	CSV   []byte
	// Truncated: the copies reached their bound within this sheet, whose CSV ends at the
	// last whole row that fitted; sheets after it have no copy.
	Truncated bool
}

// SheetCSVs writes each sheet of the workbook r as CSV (RFC 4180, UTF-8, a comma, every
// cell as Scan reads it: cached values of formulas, dates as ISO dates), so Python's
// standard library can read a workbook without an Excel library. All the copies together
// hold at most maxBytes.
func SheetCSVs(ctx context.Context, r io.ReaderAt, size int64, name string, lim Limits, maxBytes int) ([]SheetCopy, error) {
	w, err := openWorkbook(r, size, name, lim)
	if err != nil {
		return nil, err
	}
	defer w.close()
	var out []SheetCopy
	left := maxBytes
	for _, s := range w.sheets {
		cp, err := sheetCSV(ctx, w, s, left)
		if err != nil {
			return nil, err
		}
		if cp == nil {
			continue // a chart sheet: no cells
		}
		left -= len(cp.CSV)
		out = append(out, *cp)
		if cp.Truncated {
			break
		}
	}
	return out, nil
}

// sheetCSV is sheet s as CSV, of at most room bytes; nil for a sheet without cells.
func sheetCSV(ctx context.Context, w *workbook, s sheetRef, room int) (*SheetCopy, error) {
	rows, err := w.rows(s, maxExcelCol)
	if err != nil || rows == nil {
		return nil, err
	}
	defer rows.close()
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	cp := &SheetCopy{Sheet: s.name}
	var record []string
	for n := 0; ; n++ {
		if n%8192 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		cells, _, err := rows.next()
		if err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		record = record[:0]
		for _, c := range cells {
			record = append(record, string(c))
		}
		mark := buf.Len()
		_ = cw.Write(record)
		cw.Flush()
		if buf.Len() > room {
			buf.Truncate(mark)
			cp.Truncated = true
			break
		}
	}
	cp.CSV = buf.Bytes()
	return cp, nil
}
