package tables

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"strings"

	"github.com/xuri/excelize/v2"
)

// openWorkbook opens a workbook for reading its values plainly. The zip's declared sizes are checked before excelize opens
// it: in total (MaxUnzipBytes) and what excelize would hold in memory (MaxUnzipMemory;
// worksheets and shared strings over SheetMemoryBytes go to temp files instead).
// archive/zip refuses to read a part past its declared size, so a part that lies about
// its size stops there with an error.
func openWorkbook(r io.ReaderAt, size int64, fileName string, lim Limits) (*excelize.File, error) {
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
	if len(zr.File) > lim.MaxZipEntries {
		return nil, errorf(TooLarge, "%s holds %d parts; workbooks of at most %d are read.", name, len(zr.File), lim.MaxZipEntries)
	}
	var total, inMemory uint64
	workbook := false
	for _, f := range zr.File {
		n := strings.ToLower(f.Name)
		workbook = workbook || n == "xl/workbook.xml"
		total += f.UncompressedSize64
		streamed := (strings.HasPrefix(n, "xl/worksheets/sheet") || n == "xl/sharedstrings.xml") && f.UncompressedSize64 > uint64(lim.SheetMemoryBytes)
		if !streamed {
			inMemory += f.UncompressedSize64
		}
		if total > uint64(lim.MaxUnzipBytes) || f.UncompressedSize64 > uint64(lim.MaxUnzipBytes) {
			return nil, errorf(TooLarge, "%s unpacks to more than %d bytes (its parts declare %d or more); it was not read.", name, lim.MaxUnzipBytes, total)
		}
		if inMemory > uint64(lim.MaxUnzipMemory) {
			return nil, errorf(TooLarge, "%s's styles, strings and small sheets unpack to more than %d bytes; it was not read.", name, lim.MaxUnzipMemory)
		}
	}
	if !workbook {
		return nil, errorf(NotATable, "%s is a zip archive but not an Excel workbook (it has no xl/workbook.xml).", name)
	}
	f, err := excelize.OpenReader(io.NewSectionReader(r, 0, size), excelize.Options{
		UnzipSizeLimit: lim.MaxUnzipBytes, UnzipXMLSizeLimit: lim.SheetMemoryBytes, TmpDir: lim.TempDir,
	})
	if err != nil {
		return nil, errorf(Malformed, "%s could not be read as a workbook: %v", name, err)
	}
	if err := plainValues(f); err != nil {
		f.Close()
		return nil, errorf(Malformed, "%s's styles could not be read: %v", name, err)
	}
	return f, nil
}

// scanXLSX describes a workbook's sheets (openWorkbook).
func scanXLSX(ctx context.Context, r io.ReaderAt, size int64, req Request, lim Limits, t *Table) error {
	name := path.Base(req.Name)
	f, err := openWorkbook(r, size, req.Name, lim)
	if err != nil {
		return err
	}
	defer f.Close()
	t.SheetNames = f.GetSheetList()
	var names []string
	switch {
	case req.AllSheets:
		names = t.SheetNames[:min(len(t.SheetNames), lim.MaxSheets)]
		if len(t.SheetNames) > lim.MaxSheets {
			t.Notes = append(t.Notes, "Only the first sheets are described; ask for one by name for the others.")
		}
	case req.Sheet != "":
		for _, s := range t.SheetNames {
			if s == req.Sheet {
				names = []string{s}
			}
		}
		if names == nil {
			return errorf(Malformed, "%s has no sheet named %q; its sheets are: %s.", name, req.Sheet, strings.Join(t.SheetNames, ", "))
		}
	case len(t.SheetNames) > 0:
		names = t.SheetNames[:1]
	}
	for _, sheet := range names {
		sh := Sheet{Name: sheet}
		if err := scanWorksheet(ctx, f, sheet, req, lim, &sh); err != nil {
			return err
		}
		t.Sheets = append(t.Sheets, sh)
	}
	return nil
}

func scanWorksheet(ctx context.Context, f *excelize.File, sheet string, req Request, lim Limits, sh *Sheet) error {
	rows, err := f.Rows(sheet)
	if err != nil {
		sh.Data = [][]string{}
		sh.Notes = append(sh.Notes, "This sheet holds no cells (a chart sheet, or unreadable).")
		return nil
	}
	defer rows.Close()
	err = scanSheet(ctx, &xlsxRows{rows: rows, maxCols: lim.MaxColumns}, req, lim, sh)
	var te *Error
	if err != nil && !errors.As(err, &te) && ctx.Err() == nil {
		return errorf(Malformed, "Sheet %q could not be read: %v", sheet, err)
	}
	return err
}

// xlsxRows reads a worksheet's rows with excelize's streaming iterator.
type xlsxRows struct {
	rows    *excelize.Rows
	maxCols int
	cells   [][]byte
}

func (x *xlsxRows) next() ([][]byte, int, error) {
	if !x.rows.Next() {
		if err := x.rows.Error(); err != nil {
			return nil, 0, err
		}
		return nil, 0, io.EOF
	}
	cols, err := x.rows.Columns()
	if err != nil {
		return nil, 0, err
	}
	x.cells = x.cells[:0]
	for _, c := range cols[:min(len(cols), x.maxCols)] {
		x.cells = append(x.cells, []byte(c))
	}
	return x.cells, len(cols), nil
}

// plainValues makes excelize give each cell's value plainly: numbers unformatted (no
// thousands separators, currency or rounding to the shown digits), dates and times as
// ISO dates, whatever number format the workbook gave them. It points every cell style
// at one of two ISO formats or at no format at all; the file is never saved.
func plainValues(f *excelize.File) error {
	iso, isoTime := "yyyy-mm-dd", "yyyy-mm-dd hh:mm:ss"
	dateStyle, err := f.NewStyle(&excelize.Style{CustomNumFmt: &iso})
	if err != nil {
		return err
	}
	timeStyle, err := f.NewStyle(&excelize.Style{CustomNumFmt: &isoTime})
	if err != nil {
		return err
	}
	xfs := f.Styles.CellXfs.Xf
	dateFmt, timeFmt := xfs[dateStyle].NumFmtID, xfs[timeStyle].NumFmtID
	custom := map[int]string{}
	if f.Styles.NumFmts != nil {
		for _, nf := range f.Styles.NumFmts.NumFmt {
			custom[nf.NumFmtID] = nf.FormatCode
		}
	}
	none := -1 // no such format: excelize gives the value as stored
	for i := range xfs {
		if i == dateStyle || i == timeStyle {
			continue
		}
		id := 0
		if xfs[i].NumFmtID != nil {
			id = *xfs[i].NumFmtID
		}
		code, ok := custom[id]
		switch dateKind(id, code, ok) {
		case kDate:
			xfs[i].NumFmtID = dateFmt
		case kDatetime:
			xfs[i].NumFmtID = timeFmt
		case kText: // a time of day: its own format shows it
		default:
			xfs[i].NumFmtID = &none
		}
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
