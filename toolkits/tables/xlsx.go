package tables

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/flate"
)

// openWorkbook opens a workbook for reading its values plainly. The zip's declared
// sizes are checked before any part is unpacked: each part's and all together
// (MaxUnzipBytes), so a zip bomb is refused on its headers; and archive/zip refuses to
// read a part past its declared size, so a part that lies about its size stops there
// with an error. What is then held in memory is bounded whatever the parts hold: the
// cell styles' date kinds, the sheet names, and the shared strings up to
// SharedStringsMemory (the rest go to a temp file); sheets are streamed.
func openWorkbook(r io.ReaderAt, size int64, fileName string, lim Limits) (*workbook, error) {
	name := path.Base(fileName)
	if size > lim.MaxFileBytes {
		return nil, errorf(TooLarge, "%s is %d bytes; workbooks of at most %d bytes are read.", name, size, lim.MaxFileBytes)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		head := make([]byte, 8)
		n, _ := r.ReadAt(head, 0)
		if bytes.HasPrefix(head[:n], []byte("\xD0\xCF\x11\xE0")) {
			return nil, errorf(NotATable, "%s is an old Excel .xls (or another Office binary) file, not an .xlsx workbook; save it as .xlsx or CSV.", name)
		}
		return nil, errorf(NotATable, "%s is not a table: an .xlsx workbook is a zip archive, and this file is not one.", name)
	}
	zr.RegisterDecompressor(zip.Deflate, flate.NewReader)
	if len(zr.File) > lim.MaxZipEntries {
		return nil, errorf(TooLarge, "%s holds %d parts; workbooks of at most %d are read.", name, len(zr.File), lim.MaxZipEntries)
	}
	var total uint64
	workbook := false
	for _, f := range zr.File {
		workbook = workbook || strings.ToLower(f.Name) == "xl/workbook.xml"
		total += f.UncompressedSize64
		if total > uint64(lim.MaxUnzipBytes) || f.UncompressedSize64 > uint64(lim.MaxUnzipBytes) {
			return nil, errorf(TooLarge, "%s unpacks to more than %d bytes (its parts declare %d or more); it was not read.", name, lim.MaxUnzipBytes, total)
		}
	}
	if !workbook {
		return nil, errorf(NotATable, "%s is a zip archive but not an Excel workbook (it has no xl/workbook.xml).", name)
	}
	return readWorkbook(zr, name, lim)
}

// scanXLSX describes a workbook's sheets (openWorkbook).
func scanXLSX(ctx context.Context, r io.ReaderAt, size int64, req Request, lim Limits, t *Table) error {
	name := path.Base(req.Name)
	w, err := openWorkbook(r, size, req.Name, lim)
	if err != nil {
		return err
	}
	defer w.close()
	for _, s := range w.sheets {
		t.SheetNames = append(t.SheetNames, s.name)
	}
	var sheets []sheetRef
	switch {
	case req.AllSheets:
		sheets = w.sheets[:min(len(w.sheets), lim.MaxSheets)]
		if len(w.sheets) > lim.MaxSheets {
			t.Notes = append(t.Notes, "Only the first sheets are described; ask for one by name for the others.")
		}
	case req.Sheet != "":
		for _, s := range w.sheets {
			if s.name == req.Sheet {
				sheets = []sheetRef{s}
			}
		}
		if sheets == nil {
			return errorf(Malformed, "%s has no sheet named %q; its sheets are: %s.", name, req.Sheet, strings.Join(t.SheetNames, ", "))
		}
	case len(w.sheets) > 0:
		sheets = w.sheets[:1]
	}
	for _, s := range sheets {
		sh := Sheet{Name: s.name}
		if err := scanWorksheet(ctx, w, s, req, lim, &sh); err != nil {
			return err
		}
		t.Sheets = append(t.Sheets, sh)
	}
	return nil
}

func scanWorksheet(ctx context.Context, w *workbook, s sheetRef, req Request, lim Limits, sh *Sheet) error {
	rows, err := w.rows(s, lim.MaxColumns)
	if err != nil {
		return err
	}
	if rows == nil {
		sh.Data = [][]string{}
		sh.Notes = append(sh.Notes, "This sheet holds no cells (a chart sheet).")
		return nil
	}
	defer rows.close()
	if err := scanSheet(ctx, rows, false, req, lim, sh); err != nil {
		return err
	}
	if n := rows.uncomputedNote(); n != "" {
		sh.Notes = append(sh.Notes, n)
	}
	return nil
}

// dateKind says whether number format id (with its code when custom) shows a date
// (kDate), a date and time (kDatetime), a time of day only (kText), or no time (kNull).
func dateKind(id int, code string, custom bool) kind {
	if !custom {
		switch {
		case id >= 14 && id <= 17, id >= 27 && id <= 31, id >= 34 && id <= 36, id >= 50 && id <= 58:
			return kDate
		case id == 22:
			return kDatetime
		case id >= 18 && id <= 21, id == 32, id == 33, id >= 45 && id <= 47:
			return kText
		}
		return kNull
	}
	// Letters inside quotes, after a backslash or in brackets ([Red], [$-409]) are
	// literal; [h] and [mm] are elapsed time, a duration.
	var b strings.Builder
	quoted, bracket := false, false
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case quoted:
			quoted = c != '"'
		case bracket:
			bracket = c != ']'
		case c == '"':
			quoted = true
		case c == '[':
			bracket = true
		case c == '\\' || c == '_' || c == '*':
			i++
		default:
			b.WriteByte(c | 0x20)
		}
	}
	s := b.String()
	date := strings.ContainsAny(s, "yd") || strings.Contains(s, "mmm")
	clock := strings.ContainsAny(s, "hs")
	switch {
	case date && clock:
		return kDatetime
	case date:
		return kDate
	case clock:
		return kText
	}
	return kNull
}
