package tables

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
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

var errCopyFull = errors.New("copies full")

// SheetCSVs writes each sheet of the workbook r as CSV (RFC 4180, UTF-8, a comma, every
// cell as Scan reads it: cached values of formulas, dates as ISO dates), so Python's
// standard library can read a workbook without an Excel library. All the copies together
// hold at most maxBytes.
func SheetCSVs(ctx context.Context, r io.ReaderAt, size int64, name string, lim Limits, maxBytes int) ([]SheetCopy, error) {
	f, err := openWorkbook(r, size, name, lim)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []SheetCopy
	left := maxBytes
	for _, sheet := range f.GetSheetList() {
		rows, err := f.Rows(sheet)
		if err != nil {
			continue // a chart sheet: no cells
		}
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		cp := SheetCopy{Sheet: sheet}
		for n := 0; rows.Next(); n++ {
			if n%8192 == 0 && ctx.Err() != nil {
				rows.Close()
				return nil, ctx.Err()
			}
			cells, err := rows.Columns()
			if err != nil {
				rows.Close()
				return nil, errorf(Malformed, "Sheet %q could not be read: %v", sheet, err)
			}
			mark := buf.Len()
			_ = w.Write(cells)
			w.Flush()
			if buf.Len() > left {
				buf.Truncate(mark)
				cp.Truncated = true
				break
			}
		}
		rows.Close()
		left -= buf.Len()
		cp.CSV = buf.Bytes()
		out = append(out, cp)
		if cp.Truncated {
			break
		}
	}
	return out, nil
}
