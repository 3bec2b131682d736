package tables_test

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"

	"github.com/sandchat/sandchat/toolkits/tables"
)

func scan(t *testing.T, name string, data []byte, req tables.Request) (*tables.Table, error) {
	t.Helper()
	req.Name = name
	if req.Rows == 0 {
		req.Rows = 5
	}
	return tables.Scan(context.Background(), bytes.NewReader(data), int64(len(data)), req, tables.DefaultLimits)
}

func col(t *testing.T, sh tables.Sheet, name string) tables.Column {
	t.Helper()
	for _, c := range sh.Columns {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no column %q in %+v", name, sh.Columns)
	return tables.Column{}
}

func utf16le(s string) []byte {
	out := []byte{0xFF, 0xFE}
	for _, r := range s { // the tests' texts are in the BMP
		out = append(out, byte(r), byte(r>>8))
	}
	return out
}

// TestDelimited: CSV and TSV variants, each read to the same profile.
func TestDelimited(t *testing.T) {
	t.Parallel()
	const sales = "id,price,ok,day,at,city\n1,2.5,true,2024-01-15,2024-01-15 10:00:00,Paris\n2,3,false,2024-03-01,2024-03-01T12:30:00,Lyon\n3,,yes,2023-12-31,2023-12-31 23:59:59,Paris\n"
	cases := []struct {
		name, file string
		data       []byte
		enc, delim string
	}{
		{"comma", "sales.csv", []byte(sales), "utf-8", ","},
		{"semicolon", "sales.csv", []byte(strings.ReplaceAll(sales, ",", ";")), "utf-8", ";"},
		{"tab", "sales.tsv", []byte(strings.ReplaceAll(sales, ",", "\t")), "utf-8", "\t"},
		{"pipe and CRLF", "sales.csv", []byte(strings.ReplaceAll(strings.ReplaceAll(sales, ",", "|"), "\n", "\r\n")), "utf-8", "|"},
		{"UTF-8 with BOM", "sales.csv", append([]byte("\xEF\xBB\xBF"), sales...), "utf-8", ","},
		{"UTF-16 with BOM", "sales.csv", utf16le(sales), "utf-16le", ","},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := scan(t, tc.file, tc.data, tables.Request{})
			if err != nil {
				t.Fatal(err)
			}
			if tb.Encoding != tc.enc || tb.Delimiter != tc.delim || len(tb.Sheets) != 1 {
				t.Fatalf("encoding %q delimiter %q sheets %d", tb.Encoding, tb.Delimiter, len(tb.Sheets))
			}
			sh := tb.Sheets[0]
			if !sh.Header || sh.Rows != 3 || sh.ColumnCount != 6 || len(sh.Data) != 3 || sh.Data[0][5] != "Paris" {
				t.Fatalf("sheet %+v", sh)
			}
			want := map[string]string{"id": "integer", "price": "float", "ok": "bool", "day": "date", "at": "datetime", "city": "text"}
			for name, typ := range want {
				if c := col(t, sh, name); c.Type != typ {
					t.Errorf("%s: type %s, want %s", name, c.Type, typ)
				}
			}
			if c := col(t, sh, "id"); c.Min != int64(1) || c.Max != int64(3) || *c.Mean != 2 || *c.Std != 1 {
				t.Errorf("id: %+v", c)
			}
			if c := col(t, sh, "price"); c.Nulls != 1 || c.Min != 2.5 || c.Max != 3.0 {
				t.Errorf("price: %+v", c)
			}
			if c := col(t, sh, "day"); c.Min != "2023-12-31" || c.Max != "2024-03-01" {
				t.Errorf("day: %+v", c)
			}
			if c := col(t, sh, "city"); c.Distinct != 2 || len(c.Top) != 2 || c.Top[0] != (tables.Count{Value: "Paris", Count: 2}) {
				t.Errorf("city: %+v", c)
			}
		})
	}
}

// TestDelimitedText: what cells hold comes back as text, quoted, escaped, in Latin-1,
// and formulas are never evaluated.
func TestDelimitedText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, data string
		header     bool
		enc        string
		cell       string // the first data row's first cell
	}{
		{"quotes, delimiters and newlines in fields", "name,note\n\"Smith, J\",\"said \"\"hi\"\"\nthen left\"\n", true, "utf-8", "Smith, J"},
		{"a formula is text", "link,n\n\"=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",1\n", true, "utf-8", `=HYPERLINK("http://evil.example","click")`},
		{"Latin-1", "ville,n\ncaf\xe9,1\n", true, "latin-1", "café"},
		{"no header", "1,2\n3,4\n", false, "utf-8", "1"},
		{"one text row is a header", "a,b\n", true, "utf-8", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := scan(t, "f.csv", []byte(tc.data), tables.Request{})
			if err != nil {
				t.Fatal(err)
			}
			sh := tb.Sheets[0]
			if sh.Header != tc.header || tb.Encoding != tc.enc {
				t.Fatalf("header %v encoding %s: %+v", sh.Header, tb.Encoding, sh)
			}
			got := ""
			if len(sh.Data) > 0 {
				got = sh.Data[0][0]
			}
			if got != tc.cell {
				t.Fatalf("first cell %q, want %q", got, tc.cell)
			}
		})
	}
	tb, _ := scan(t, "f.csv", []byte("name,note\n\"Smith, J\",\"said \"\"hi\"\"\nthen left\"\n"), tables.Request{})
	if got := tb.Sheets[0].Data[0][1]; got != "said \"hi\"\nthen left" {
		t.Fatalf("quoted field %q", got)
	}
}

// TestWindow: preview_rows' window over the data rows.
func TestWindow(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("n,sq\n")
	for i := range 150 {
		fmt.Fprintf(&b, "%d,%d\n", i, i*i)
	}
	tb, err := scan(t, "n.csv", []byte(b.String()), tables.Request{Offset: 10, Rows: 3})
	if err != nil {
		t.Fatal(err)
	}
	sh := tb.Sheets[0]
	if sh.Rows != 150 || sh.Offset != 10 || len(sh.Data) != 3 || sh.Data[0][0] != "10" || sh.Data[2][1] != "144" {
		t.Fatalf("%+v", sh)
	}
	tb, _ = scan(t, "n.csv", []byte(b.String()), tables.Request{Rows: 100000})
	if len(tb.Sheets[0].Data) != tables.DefaultLimits.MaxRows {
		t.Fatalf("rows past the limit: %d", len(tb.Sheets[0].Data))
	}
}

func TestJSONL(t *testing.T) {
	t.Parallel()
	data := "{\"id\":1,\"name\":\"a\",\"tags\":[1,2]}\n\n{\"id\":2,\"name\":null,\"extra\":true}\r\n{\"name\":\"caf\\u00e9\",\"id\":3.5}\n"
	tb, err := scan(t, "events.jsonl", []byte(data), tables.Request{})
	if err != nil {
		t.Fatal(err)
	}
	sh := tb.Sheets[0]
	if sh.Rows != 3 || len(sh.Columns) != 4 || sh.Columns[0].Name != "id" || sh.Columns[3].Name != "extra" {
		t.Fatalf("%+v", sh)
	}
	if c := col(t, sh, "id"); c.Type != "float" || c.Max != 3.5 {
		t.Errorf("id %+v", c)
	}
	if c := col(t, sh, "name"); c.Nulls != 1 || c.Type != "text" {
		t.Errorf("name %+v", c)
	}
	if c := col(t, sh, "extra"); c.Nulls != 2 || c.Type != "bool" {
		t.Errorf("extra %+v", c)
	}
	if sh.Data[0][2] != "[1,2]" || sh.Data[2][1] != "café" {
		t.Errorf("data %q", sh.Data)
	}
	_, err = scan(t, "bad.jsonl", []byte("{\"a\":1}\n[1,2]\n"), tables.Request{})
	assertKind(t, err, tables.Malformed, "Line 2 is not a JSON object")
}

func assertKind(t *testing.T, err error, kind tables.ErrorKind, says string) {
	t.Helper()
	var te *tables.Error
	if !errors.As(err, &te) || te.Kind != kind || !strings.Contains(te.Message, says) {
		t.Fatalf("error %v, want kind %d saying %q", err, kind, says)
	}
}

// endless is a file of size bytes, each b, that is never held in memory.
type endless struct {
	size int64
	b    byte
	tail string // the last bytes
}

func (e endless) ReadAt(p []byte, off int64) (int, error) {
	if off >= e.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), e.size-off))
	for i := range n {
		pos := off + int64(i)
		if k := pos - (e.size - int64(len(e.tail))); k >= 0 {
			p[i] = e.tail[k]
		} else {
			p[i] = e.b
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestHostile: files made to hurt the reader get a clear error or a bounded result.
func TestHostile(t *testing.T) {
	t.Parallel()
	wide := strings.Repeat("c,", 4999) + "c\n" + strings.Repeat("1,", 4999) + "1\n"
	var distinct strings.Builder
	distinct.WriteString("v\n")
	for i := range 5000 {
		fmt.Fprintf(&distinct, "value %d\n", i)
	}
	var keys strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&keys, "{\"%s%d\": %d}\n", strings.Repeat("k", 5000), i, i)
	}
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	manyRows := "a,b\n" + strings.Repeat("1,2\n", 20000)
	cases := []struct {
		name string
		file string
		r    io.ReaderAt
		size int64
		kind tables.ErrorKind
		says string
		ok   func(*tables.Table) string // for a bounded result
	}{
		{name: "a 100 MB single line", file: "line.csv", r: endless{size: 100 << 20, b: 'x'}, size: 100 << 20,
			kind: tables.Malformed, says: "longer than 1048576 bytes"},
		{name: "a million columns", file: "cols.csv", r: endless{size: 2_000_000, b: ',', tail: "\n"}, size: 2_000_000,
			kind: tables.Malformed, says: "longer than"},
		{name: "an unclosed quote", file: "q.csv", r: strings.NewReader("a,b\n\"x,1\n2,3\n"), size: 13,
			kind: tables.Malformed, says: "never closed"},
		{name: "an unclosed quote after many rows", file: "q.csv", r: strings.NewReader(manyRows + "\"x,1\n2,3\n"), size: int64(len(manyRows) + 9),
			kind: tables.Malformed, says: "starting on line 20002 is never closed"},
		{name: "5000 columns are counted, 256 described", file: "wide.csv", r: strings.NewReader(wide), size: int64(len(wide)),
			ok: func(tb *tables.Table) string {
				sh := tb.Sheets[0]
				if sh.ColumnCount != 5000 || len(sh.Columns) != 256 || len(sh.Data[0]) != 256 || len(sh.Notes) == 0 {
					return fmt.Sprintf("count %d described %d data %d notes %q", sh.ColumnCount, len(sh.Columns), len(sh.Data[0]), sh.Notes)
				}
				return ""
			}},
		{name: "distinct values are bounded", file: "d.csv", r: strings.NewReader(distinct.String()), size: int64(distinct.Len()),
			ok: func(tb *tables.Table) string {
				c := tb.Sheets[0].Columns[0]
				if c.Distinct != 1000 || !c.DistinctCapped || tb.Sheets[0].Rows != 5000 {
					return fmt.Sprintf("%+v", c)
				}
				return ""
			}},
		{name: "invalid UTF-8 after the head", file: "bad.csv", r: strings.NewReader("a\n" + strings.Repeat("ok\n", 30000) + "\xff\xfe\xfd\n"), size: int64(2 + 90000 + 4),
			ok: func(tb *tables.Table) string {
				sh := tb.Sheets[0]
				if tb.Encoding != "utf-8" || sh.Rows != 30001 || col(t, sh, "a").Top[1].Value != "\uFFFD" {
					return fmt.Sprintf("%s %d %+v", tb.Encoding, sh.Rows, col(t, sh, "a").Top)
				}
				return ""
			}},
		{name: "JSON keys: long, and more than the columns", file: "k.jsonl", r: strings.NewReader(keys.String()), size: int64(keys.Len()),
			ok: func(tb *tables.Table) string {
				sh := tb.Sheets[0]
				if sh.ColumnCount != 1000 || len(sh.Columns) != 256 || len(sh.Columns[0].Name) > 260 || sh.Columns[0].Nulls != 999 {
					return fmt.Sprintf("count %d described %d name %d bytes, nulls %d", sh.ColumnCount, len(sh.Columns), len(sh.Columns[0].Name), sh.Columns[0].Nulls)
				}
				return ""
			}},
		{name: "an image named .csv", file: "photo.csv", r: bytes.NewReader(png), size: int64(len(png)), kind: tables.NotATable, says: "binary data"},
		{name: "a workbook named .csv", file: "book.csv", r: bytes.NewReader(workbook(t)), size: int64(len(workbook(t))), kind: tables.NotATable, says: "zip archive"},
		{name: "an image", file: "photo.png", r: bytes.NewReader(png), size: int64(len(png)), kind: tables.NotATable, says: "photo.png is not a table"},
		{name: "CSV named .xlsx", file: "sales.xlsx", r: strings.NewReader("a,b\n1,2\n"), size: 8, kind: tables.NotATable, says: "and this file is not one"},
		{name: "a zip that is no workbook", file: "x.xlsx", r: bytes.NewReader(zipOf(t, "readme.txt", "hi")), size: int64(len(zipOf(t, "readme.txt", "hi"))), kind: tables.NotATable, says: "no xl/workbook.xml"},
		{name: "a zip bomb: declared sizes", file: "bomb.xlsx", r: bytes.NewReader(bomb(t, 1<<40, 1<<40)), size: int64(len(bomb(t, 1<<40, 1<<40))), kind: tables.TooLarge, says: "unpacks to more than"},
		{name: "a zip bomb: sizes that lie", file: "liar.xlsx", r: bytes.NewReader(bomb(t, 64<<20, 1000)), size: int64(len(bomb(t, 64<<20, 1000))), kind: tables.Malformed, says: "could not be read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := tables.Scan(context.Background(), tc.r, tc.size, tables.Request{Name: tc.file, Rows: 5, AllSheets: true}, tables.DefaultLimits)
			if tc.ok != nil {
				if err != nil {
					t.Fatal(err)
				}
				if why := tc.ok(tb); why != "" {
					t.Fatal(why)
				}
				return
			}
			assertKind(t, err, tc.kind, tc.says)
		})
	}
}

func zipOf(t *testing.T, name, content string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, content)
	zw.Close()
	return buf.Bytes()
}

// bomb is a workbook whose one sheet unpacks to actual bytes of zeros while its zip
// headers declare declared bytes.
func bomb(t *testing.T, actual, declared uint64) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("xl/workbook.xml")
	io.WriteString(w, `<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheets><sheet name="S" sheetId="1" r:id="rId1" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"/></sheets></workbook>`)
	var comp bytes.Buffer
	crc := crc32.NewIEEE()
	fw, _ := flate.NewWriter(&comp, flate.BestSpeed)
	zeros := make([]byte, 1<<20)
	if actual > 1<<30 {
		actual = 1 << 20 // only the headers are ever looked at
	}
	for left := actual; left > 0; left -= min(left, uint64(len(zeros))) {
		n := min(left, uint64(len(zeros)))
		fw.Write(zeros[:n])
		crc.Write(zeros[:n])
	}
	fw.Close()
	raw, err := zw.CreateRaw(&zip.FileHeader{Name: "xl/worksheets/sheet1.xml", Method: zip.Deflate,
		CRC32: crc.Sum32(), CompressedSize64: uint64(comp.Len()), UncompressedSize64: declared})
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(comp.Bytes())
	zw.Close()
	return buf.Bytes()
}

// workbook is an .xlsx with two sheets: dates in Excel's date formats, numbers in
// display formats, a formula with its cached value, a formula-like text.
func workbook(t *testing.T) []byte {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	f.SetSheetName("Sheet1", "Sales")
	dateStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 14})
	stampFmt := "m/d/yy h:mm"
	stampStyle, _ := f.NewStyle(&excelize.Style{CustomNumFmt: &stampFmt})
	moneyStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 4}) // #,##0.00
	rows := [][]any{
		{"day", "stamp", "amount", "double", "big", "link"},
		{time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC), time.Date(2024, 1, 15, 9, 30, 0, 0, time.UTC), 1234.5, nil, int64(123456789012), "=HYPERLINK(\"http://evil.example\",\"x\")"},
		{time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 2, 1, 18, 0, 0, 0, time.UTC), 10, nil, int64(2), "plain"},
	}
	for i, r := range rows {
		cell, _ := excelize.CoordinatesToCellName(1, i+1)
		if err := f.SetSheetRow("Sales", cell, &r); err != nil {
			t.Fatal(err)
		}
	}
	f.SetCellStyle("Sales", "A2", "A3", dateStyle)
	f.SetCellStyle("Sales", "B2", "B3", stampStyle)
	f.SetCellStyle("Sales", "C2", "C3", moneyStyle)
	// The cached value is what is read: 99 is not C2*2, and nothing recomputes it.
	for _, c := range []string{"D2", "D3"} {
		f.SetCellValue("Sales", c, 99)
		f.SetCellFormula("Sales", c, "C2*2")
	}
	f.NewSheet("Notes")
	f.SetSheetRow("Notes", "A1", &[]any{"note"})
	f.SetSheetRow("Notes", "A2", &[]any{"first"})
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestXLSX(t *testing.T) {
	t.Parallel()
	data := workbook(t)
	tb, err := scan(t, "sales.xlsx", data, tables.Request{AllSheets: true})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Format != "xlsx" || strings.Join(tb.SheetNames, ",") != "Sales,Notes" || len(tb.Sheets) != 2 {
		t.Fatalf("%+v", tb)
	}
	sh := tb.Sheets[0]
	if !sh.Header || sh.Rows != 2 {
		t.Fatalf("%+v", sh)
	}
	want := map[string][3]any{
		"day":    {"date", "2024-01-15", "2024-02-01"},
		"stamp":  {"datetime", "2024-01-15 09:30:00", "2024-02-01 18:00:00"},
		"amount": {"float", 10.0, 1234.5},
		"double": {"integer", int64(99), int64(99)},
		"big":    {"integer", int64(2), int64(123456789012)},
		"link":   {"text", nil, nil},
	}
	for name, w := range want {
		c := col(t, sh, name)
		if c.Type != w[0] || c.Min != w[1] || c.Max != w[2] {
			t.Errorf("%s: %s %v..%v, want %v", name, c.Type, c.Min, c.Max, w)
		}
	}
	if got := sh.Data[0][5]; got != `=HYPERLINK("http://evil.example","x")` {
		t.Errorf("formula-like text %q", got)
	}
	if tb.Sheets[1].Name != "Notes" || tb.Sheets[1].Data[0][0] != "first" {
		t.Errorf("second sheet %+v", tb.Sheets[1])
	}
	one, err := scan(t, "sales.xlsx", data, tables.Request{Sheet: "Notes"})
	if err != nil || len(one.Sheets) != 1 || one.Sheets[0].Name != "Notes" {
		t.Fatalf("one sheet: %v %+v", err, one)
	}
	_, err = scan(t, "sales.xlsx", data, tables.Request{Sheet: "Nope"})
	assertKind(t, err, tables.Malformed, `no sheet named "Nope"; its sheets are: Sales, Notes`)
}

// TestSheetCSVs: each sheet becomes a CSV of its values as read (dates ISO, cached
// formula values, formula-like text quoted as text), within the bound.
func TestSheetCSVs(t *testing.T) {
	t.Parallel()
	data := workbook(t)
	copies, err := tables.SheetCSVs(context.Background(), bytes.NewReader(data), int64(len(data)), "sales.xlsx", tables.DefaultLimits, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 2 || copies[0].Sheet != "Sales" || copies[1].Sheet != "Notes" {
		t.Fatalf("%+v", copies)
	}
	want := "day,stamp,amount,double,big,link\n2024-01-15,2024-01-15 09:30:00,1234.5,99,123456789012,\"=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")\"\n"
	if got := string(copies[0].CSV); !strings.HasPrefix(got, want) || string(copies[1].CSV) != "note\nfirst\n" {
		t.Fatalf("copies:\n%s\n%s", got, copies[1].CSV)
	}
	small, err := tables.SheetCSVs(context.Background(), bytes.NewReader(data), int64(len(data)), "sales.xlsx", tables.DefaultLimits, 40)
	if err != nil || len(small) != 1 || !small[0].Truncated || string(small[0].CSV) != "day,stamp,amount,double,big,link\n" {
		t.Fatalf("bounded copies: %v %+v", err, small)
	}
	_, err = tables.SheetCSVs(context.Background(), strings.NewReader("a,b\n"), 4, "x.xlsx", tables.DefaultLimits, 1<<20)
	assertKind(t, err, tables.NotATable, "this file is not one")
}
