package tables

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"
)

// readAll reads every sheet of a workbook with sheetRows: sheet name → rows of cells.
func readAll(t *testing.T, data []byte) (map[string][][]string, []string) {
	t.Helper()
	w, err := openWorkbook(bytes.NewReader(data), int64(len(data)), "t.xlsx", DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	out := map[string][][]string{}
	var names []string
	for _, s := range w.sheets {
		names = append(names, s.name)
		rows, err := w.rows(s, maxExcelCol)
		if err != nil {
			t.Fatal(err)
		}
		if rows == nil {
			continue
		}
		var got [][]string
		for {
			cells, width, err := rows.next()
			if err == io.EOF {
				break
			} else if err != nil {
				rows.close()
				t.Fatalf("sheet %s: %v", s.name, err)
			}
			if width != len(cells) {
				t.Fatalf("sheet %s row %d: width %d, %d cells", s.name, len(got)+1, width, len(cells))
			}
			row := []string{}
			for _, c := range cells {
				row = append(row, string(c))
			}
			got = append(got, row)
		}
		rows.close()
		out[s.name] = got
	}
	return out, names
}

// excelizeAll reads every sheet with excelize's row iterator (File.Rows), each cell style pointed at
// an ISO date format or at none, as the reader before sheetRows did: the oracle.
func excelizeAll(t *testing.T, data []byte) map[string][][]string {
	t.Helper()
	f, err := excelize.OpenReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	iso, isoTime := "yyyy-mm-dd", "yyyy-mm-dd hh:mm:ss"
	dateStyle, _ := f.NewStyle(&excelize.Style{CustomNumFmt: &iso})
	timeStyle, _ := f.NewStyle(&excelize.Style{CustomNumFmt: &isoTime})
	xfs := f.Styles.CellXfs.Xf
	dateFmt, timeFmt := xfs[dateStyle].NumFmtID, xfs[timeStyle].NumFmtID
	custom := map[int]string{}
	if f.Styles.NumFmts != nil {
		for _, nf := range f.Styles.NumFmts.NumFmt {
			custom[nf.NumFmtID] = nf.FormatCode
		}
	}
	none := -1
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
		case kText:
			t.Fatal("the oracle shows times of day in their own format: keep them out of its workbooks")
		default:
			xfs[i].NumFmtID = &none
		}
	}
	out := map[string][][]string{}
	for _, sheet := range f.GetSheetList() {
		rows, err := f.Rows(sheet)
		if err != nil {
			continue
		}
		var all [][]string
		for rows.Next() {
			cols, err := rows.Columns()
			if err != nil {
				t.Fatal(err)
			}
			if cols == nil {
				cols = []string{}
			}
			all = append(all, cols)
		}
		rows.Close()
		out[sheet] = all
	}
	return out
}

// build is a workbook excelize writes with fill.
func build(t *testing.T, fill func(f *excelize.File)) []byte {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	fill(f)
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSheetRowsMatchExcelize: on workbooks excelize writes, sheetRows reads what
// excelize's own row iterator reads, cell for cell.
func TestSheetRowsMatchExcelize(t *testing.T) {
	t.Parallel()
	day := time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC)
	stamp := time.Date(2024, 1, 15, 9, 30, 15, 0, time.UTC)
	books := map[string][]byte{
		"shared strings, dates, formulas, number formats": build(t, func(f *excelize.File) {
			dateStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 14})
			longDate, _ := f.NewStyle(&excelize.Style{NumFmt: 15}) // d-mmm-yy
			stampFmt := "yyyy/mm/dd hh:mm:ss"
			stampStyle, _ := f.NewStyle(&excelize.Style{CustomNumFmt: &stampFmt})
			money := `"$"#,##0.00;[Red]-"$"#,##0.00`
			moneyStyle, _ := f.NewStyle(&excelize.Style{CustomNumFmt: &money})
			pct, _ := f.NewStyle(&excelize.Style{NumFmt: 10})
			f.SetSheetRow("Sheet1", "A1", &[]any{"day", "long", "stamp", "money", "pct", "formula", "text"})
			for i := range 5 {
				r := i + 2
				f.SetSheetRow("Sheet1", fmt.Sprintf("A%d", r), &[]any{day.AddDate(0, 0, i*40), day.AddDate(i, 0, 0), stamp.Add(time.Duration(i) * 7 * time.Hour),
					1234.5 * float64(i+1), 0.125 * float64(i), nil, fmt.Sprintf("row %d", i)})
				f.SetCellFormula("Sheet1", fmt.Sprintf("F%d", r), fmt.Sprintf("D%d*2", r))
				f.SetCellValue("Sheet1", fmt.Sprintf("F%d", r), 2469*(i+1))
			}
			f.SetCellStyle("Sheet1", "A2", "A6", dateStyle)
			f.SetCellStyle("Sheet1", "B2", "B6", longDate)
			f.SetCellStyle("Sheet1", "C2", "C6", stampStyle)
			f.SetCellStyle("Sheet1", "D2", "D6", moneyStyle)
			f.SetCellStyle("Sheet1", "E2", "E6", pct)
		}),
		"sparse cells and rows": build(t, func(f *excelize.File) {
			f.SetCellValue("Sheet1", "B2", "b2")
			f.SetCellValue("Sheet1", "E2", 5)
			f.SetCellValue("Sheet1", "A5", "a5")
			f.SetCellValue("Sheet1", "AA7", "far")
			f.SetCellValue("Sheet1", "C9", "")
			f.NewSheet("Empty")
			f.NewSheet("Gaps")
			f.SetCellValue("Gaps", "C3", "only")
		}),
		"booleans, numbers, escapes, rich text": build(t, func(f *excelize.File) {
			f.SetSheetRow("Sheet1", "A1", &[]any{true, false, 0.1 + 0.2, 1e20, int64(123456789012345678), -0.5, 1.5e-7, 3.0, -0, 1e-300})
			f.SetSheetRow("Sheet1", "A2", &[]any{"a & b", "<tag>", `"quoted" 'single'`, "tab\there", "line\nbreak", "café €", "_x000D_ literal", "  padded  ", "=HYPERLINK(\"http://x\")"})
			f.SetCellRichText("Sheet1", "A3", []excelize.RichTextRun{{Text: "bold "}, {Text: "and plain", Font: &excelize.Font{Bold: true}}})
			f.SetCellValue("Sheet1", "B3", math.MaxInt32)
			f.SetCellValue("Sheet1", "C3", "12345")
		}),
		"inline strings from the stream writer": build(t, func(f *excelize.File) {
			sw, _ := f.NewStreamWriter("Sheet1")
			dateStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 14})
			sw.SetRow("A1", []any{"id", "when", "note"})
			for i := 2; i < 50; i++ {
				sw.SetRow(fmt.Sprintf("A%d", i), []any{i, excelize.Cell{StyleID: dateStyle, Value: day.AddDate(0, 0, i)}, fmt.Sprintf("n<%d> & more", i)})
			}
			sw.SetRow("A60", []any{"after a gap"})
			sw.Flush()
		}),
		"many rows, over many of the reader's buffers": build(t, func(f *excelize.File) {
			sw, _ := f.NewStreamWriter("Sheet1")
			dateStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 22})
			for i := 1; i <= 30000; i++ {
				sw.SetRow(fmt.Sprintf("A%d", i), []any{i, float64(i) / 7, excelize.Cell{StyleID: dateStyle, Value: stamp.Add(time.Duration(i) * time.Minute)},
					strings.Repeat("x", i%300), fmt.Sprintf("a & b < %d", i), i%2 == 0})
			}
			sw.Flush()
		}),
		"the 1904 date system": build(t, func(f *excelize.File) {
			yes := true
			f.SetWorkbookProps(&excelize.WorkbookPropsOptions{Date1904: &yes})
			dateStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 14})
			stampStyle, _ := f.NewStyle(&excelize.Style{NumFmt: 22})
			f.SetSheetRow("Sheet1", "A1", &[]any{day, stamp, 1000})
			f.SetCellStyle("Sheet1", "A1", "A1", dateStyle)
			f.SetCellStyle("Sheet1", "B1", "B1", stampStyle)
			f.SetCellStyle("Sheet1", "C1", "C1", dateStyle)
		}),
	}
	for name, data := range books {
		t.Run(name, func(t *testing.T) {
			got, _ := readAll(t, data)
			want := excelizeAll(t, data)
			if len(got) != len(want) {
				t.Fatalf("sheets %v, excelize %v", got, want)
			}
			for sheet, rows := range want {
				if fmt.Sprint(got[sheet]) != fmt.Sprint(rows) {
					t.Errorf("sheet %s:\n got %q\nwant %q", sheet, got[sheet], rows)
				}
			}
		})
	}
	// The 1904 workbook's values, not only their agreement.
	got, _ := readAll(t, books["the 1904 date system"])
	if row := got["Sheet1"][0]; strings.Join(row, "|") != "2024-01-15|2024-01-15 09:30:15|1906-09-27" {
		t.Errorf("1904 dates %q", row)
	}
}

// part is one file of a hand-written workbook.
type part struct{ name, body string }

// handWorkbook is a workbook of the given sheet XML (sheetData's content), shared
// strings (sst's content, none if "") and styles (the whole part, none if "").
func handWorkbook(t *testing.T, sheetData, sst, styles, workbookPr string) []byte {
	t.Helper()
	const ns = `xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"`
	rels := `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/>
<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="/xl/sharedStrings.xml"/>
<Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>
</Relationships>`
	parts := []part{
		{"[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/><Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/><Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/></Types>`},
		{"_rels/.rels", `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>`},
		{"xl/workbook.xml", `<?xml version="1.0" encoding="UTF-8"?><workbook ` + ns + `>` + workbookPr + `<sheets><sheet name="Data &amp; more" sheetId="1" r:id="rId1"/></sheets></workbook>`},
		{"xl/_rels/workbook.xml.rels", rels},
		{"xl/worksheets/sheet1.xml", `<?xml version="1.0" encoding="UTF-8"?>
<worksheet ` + ns + `><dimension ref="A1:D9"/><sheetData>` + sheetData + `</sheetData><mergeCells count="1"><mergeCell ref="A1:B1"/></mergeCells></worksheet>`},
	}
	if sst != "" {
		parts = append(parts, part{"xl/sharedStrings.xml", `<?xml version="1.0" encoding="UTF-8"?><sst ` + ns + ` count="9" uniqueCount="9">` + sst + `</sst>`})
	}
	if styles != "" {
		parts = append(parts, part{"xl/styles.xml", `<?xml version="1.0" encoding="UTF-8"?>` + styles})
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range parts {
		w, err := zw.Create(p.name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const handStyles = `<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">
<numFmts count="3"><numFmt numFmtId="164" formatCode="dd/mm/yyyy"/><numFmt numFmtId="165" formatCode="&quot;Total: &quot;0.00"/><numFmt numFmtId="166" formatCode="[$-409]h:mm\ AM/PM"/></numFmts>
<cellStyleXfs count="2"><xf numFmtId="14"/><xf numFmtId="0"/></cellStyleXfs>
<cellXfs count="6"><xf numFmtId="0" xfId="0"/><xf numFmtId="164" xfId="0" applyNumberFormat="1"/><xf numFmtId="22" xfId="0"/><xf numFmtId="165" xfId="0"/><xf numFmtId="166" xfId="0"/><xf numFmtId="4" xfId="0"><alignment horizontal="left"/></xf></cellXfs>
</styleSheet>`

// TestSheetRowsForms: what the reader must get right of the forms a sheet's XML takes,
// on hand-written parts: shared strings (rich runs, phonetic runs left out) and inline
// ones, missing cells and rows, cells without references, booleans, errors, entities
// and character references, CDATA, namespace prefixes, dates through the cell style's
// number format (custom or built in) in either date system, ISO date cells, cached
// formula values.
func TestSheetRowsForms(t *testing.T) {
	t.Parallel()
	sst := `<si><t>plain</t></si><si><r><rPr><b/></rPr><t xml:space="preserve">rich </t></r><r><t>runs</t></r><rPh sb="0" eb="1"><t>フリガナ</t></rPh></si>` +
		`<si><t>a &amp; b &lt;c&gt; &quot;d&quot; &#233;&#x20AC;</t></si><si/><si><t>line_x000D_end and _x005F_x0041_</t></si>`
	cases := []struct {
		name, sheetData, workbookPr string
		want                        [][]string
	}{
		{name: "shared and inline strings",
			sheetData: `<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>2</v></c><c r="D1" t="s"><v>3</v></c><c r="E1" t="s"><v>4</v></c></row>` +
				`<row r="2"><c r="A2" t="inlineStr"><is><t>inline &amp; escaped</t></is></c><c r="B2" t="inlineStr"><is><r><t>in</t></r><r><rPr><i/></rPr><t>line runs</t></r></is></c><c r="C2" t="s"><v>99</v></c><c r="D2" t="str"><v>formula text</v></c></row>`,
			want: [][]string{{"plain", "rich runs", `a & b <c> "d" é€`, "", "line\rend and _x0041_"}, {"inline & escaped", "inline runs", "", "formula text"}}},
		{name: "missing cells and rows, cells without references",
			sheetData: `<row r="2"><c r="B2"><v>1</v></c><c r="D2"><v>2</v></c></row><row r="3"><c><v>3</v></c><c><v>4</v></c><c r="F3"/><c r="G3" s="5"></c></row>` +
				`<row r="5" spans="1:3"/><row><c r="C6" t="inlineStr"><is><t></t></is></c><c r="B6"><v>5</v></c></row>`,
			want: [][]string{{}, {"", "1", "", "2"}, {"3", "4"}, {}, {}, {"", "5"}}},
		{name: "booleans, errors, formulas' cached values",
			sheetData: `<row r="1"><c r="A1" t="b"><v>1</v></c><c r="B1" t="b"><v>0</v></c><c r="C1" t="e"><v>#DIV/0!</v></c><c r="D1" t="e"><f>NA()</f><v>#N/A</v></c>` +
				`<c r="E1"><f>1+1</f><v>2</v></c><c r="F1" t="str"><f>"=HYPERLINK(""x"")"</f><v>=HYPERLINK("x")</v></c><c r="G1"><f>B1</f></c></row>`,
			want: [][]string{{"TRUE", "FALSE", "#DIV/0!", "#N/A", "2", `=HYPERLINK("x")`, ""}}},
		{name: "numbers as Excel shows them",
			sheetData: `<row r="1"><c r="A1"><v>0.30000000000000004</v></c><c r="B1"><v>1E+20</v></c><c r="C1"><v>1.5E-7</v></c><c r="D1"><v>007</v></c><c r="E1"><v>2.50</v></c>` +
				`<c r="F1"><v>123456789012345678</v></c><c r="G1"><v>-0</v></c><c r="H1"><v>12.5</v></c><c r="I1" s="3"><v>12.5</v></c><c r="J1" s="5"><v>1234567.891</v></c><c r="K1"><v>not a number</v></c></row>`,
			want: [][]string{{"0.3", "1E+20", "0.00000015", "7", "2.5", "1.23456789012346E+17", "-0", "12.5", "12.5", "1234567.891", "not a number"}}},
		{name: "dates through styles, the 1900 system",
			sheetData: `<row r="1"><c r="A1" s="1"><v>45306</v></c><c r="B1" s="2"><v>45306.395833333336</v></c><c r="C1" s="4"><v>0.75</v></c><c r="D1" s="1"><v>59</v></c><c r="E1" s="1"><v>61</v></c>` +
				`<c r="F1" s="1"><v>-1</v></c><c r="G1" s="1"><v>3000000</v></c><c r="H1" t="d" s="1"><v>2024-03-05T00:00:00</v></c><c r="I1" t="d"><v>2024-03-05T10:11:12Z</v></c><c r="J1" s="1" t="s"><v>0</v></c><c r="K1" s="99"><v>45306</v></c></row>`,
			want: [][]string{{"2024-01-15", "2024-01-15 09:30:00", "18:00:00", "1900-02-28", "1900-03-01", "-1", "3000000", "2024-03-05", "2024-03-05 10:11:12", "plain", "45306"}}},
		{name: "tags like their column's last one but for the reference, and others",
			sheetData: `<row r="1"><c r="A1" s="1"><v>45306</v></c><c r="B1" t="s"><v>0</v></c></row>` +
				`<row r="2"><c r="A2" s="1"><v>45307</v></c><c r="B2"><v>7</v></c></row>` +
				`<row r="3"><c r="A3"><v>45306</v></c><c r="B3" t="s"><v>0</v></c></row>` +
				`<row r="4"><c r="A4" s="1" r="C4"><v>1</v></c></row><row><c r="A5" s="1"><v>45306</v></c></row>` +
				`<row r="6"><c r="A6"><v>2</v></c><c r="B6" t="s"><v>0</v></c><c r="C6" s="1"><v>45306</v></c><c r="D6" s="1"><v>45306</v></c></row>` +
				`<row r="7"><c r="A70"><v>3</v></c><c r="B7" s="1"/><c r="C7" s="1"><v>1</v></c><c r="D7" s="1"><v>45306</v></c></row>`,
			want: [][]string{{"2024-01-15", "plain"}, {"2024-01-16", "7"}, {"45306", "plain"}, {"", "", "1900-01-01"}, {"2024-01-15"},
				{"2", "plain", "2024-01-15", "2024-01-15"}, {"3", "", "1900-01-01", "2024-01-15"}}},
		{name: "dates through styles, the 1904 system", workbookPr: `<workbookPr date1904="1"/>`,
			sheetData: `<row r="1"><c r="A1" s="1"><v>43844</v></c><c r="B1" s="2"><v>0.5</v></c></row>`,
			want:      [][]string{{"2024-01-15", "1904-01-01 12:00:00"}}},
		{name: "prefixes, comments, CDATA, entities in attributes",
			sheetData: `<!-- a comment with <row> in it --><x:row r="1" xmlns:x="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><x:c r='A1' t='inlineStr'><x:is><x:t><![CDATA[<not a tag> & raw]]></x:t></x:is></x:c>` +
				`<x:c r="B1" t="inlineStr"><x:is><x:t xml:space="preserve">  spaced  </x:t></x:is></x:c><x:c r="C1" t="inlineStr"><x:is><x:t>a&#10;b&#xD;c</x:t></x:is></x:c></x:row>` +
				`<row r="2" ht="15" customHeight="1" x14ac:dyDescent="0.25"><c r="A2"><v>1</v></c></row>`,
			want: [][]string{{"<not a tag> & raw", "  spaced  ", "a\nb\rc"}, {"1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, names := readAll(t, handWorkbook(t, tc.sheetData, sst, handStyles, tc.workbookPr))
			if len(names) != 1 || names[0] != "Data & more" {
				t.Fatalf("sheets %q", names)
			}
			if fmt.Sprintf("%q", got["Data & more"]) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("\n got %q\nwant %q", got["Data & more"], tc.want)
			}
		})
	}
}

// TestSheetRowsMalformed: a sheet whose XML or references are broken is an error that
// says so, never a panic.
func TestSheetRowsMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, sheetData, says string }{
		{"a reference past Excel's columns", `<row r="1"><c r="XFE1"><v>1</v></c></row>`, `a cell reference "XFE1"`},
		{"a row past Excel's rows", `<row r="1048577"><c><v>1</v></c></row>`, "a row number"},
		{"a reference without a row", `<row r="1"><c r="A"><v>1</v></c></row>`, `a cell reference "A"`},
		// Found by FuzzSheetAcrossReads: taken as A in a buffer with room after it.
		{"a reference whose row is not digits", `<row r="1"><c r="A/"><v>1</v></c></row>`, `a cell reference "A/"`},
		{"a reference whose row ends in a space", `<row r="1"><c r="B2 "><v>1</v></c></row>`, `a cell reference "B2 "`},
		// Found by FuzzSheetAcrossReads: read as a cell or as part of a longer tag, by
		// where the buffer ended.
		{"attributes not apart", `<row r="1"><c r="A1""t="s"><v>0</v></c><c r="B1"><v>1</v></c></row>`, "ends inside a tag"},
		{"more cells than Excel's columns", `<row r="1">` + strings.Repeat(`<c s="0"><v>1</v></c>`, maxExcelCol+1) + `</row>`, "more than Excel's 16384 columns"},
		{"more unreferenced cells than Excel's columns", `<row r="1">` + strings.Repeat(`<x:c><x:v>1</x:v></x:c>`, maxExcelCol+1) + `</row>`, "more than Excel's 16384 columns"},
		{"a sheet cut inside a tag", `<row r="1"><c r="A1"`, "malformed"},
		{"a tag longer than the scanner's buffer", `<row r="1"><c r="A1" x="` + strings.Repeat("y", 2*xmlScanBytes) + `"><v>1</v></c></row>`, "longer than 262144 bytes"},
		{"a sheet cut inside a cell", `<row r="1"><c r="A1"><v>1`, "could not be read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := handWorkbook(t, tc.sheetData, "", "", "")
			if tc.name == "a sheet cut inside a tag" || tc.name == "a sheet cut inside a cell" {
				data = cutSheet(t, data, tc.sheetData)
			}
			w, err := openWorkbook(bytes.NewReader(data), int64(len(data)), "t.xlsx", DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			defer w.close()
			rows, err := w.rows(w.sheets[0], 256)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.close()
			for err == nil {
				_, _, err = rows.next()
			}
			var te *Error
			if !errors.As(err, &te) || te.Kind != Malformed || !strings.Contains(te.Message, tc.says) {
				t.Fatalf("error %v, want one saying %q", err, tc.says)
			}
		})
	}
}

// cutSheet rewrites the workbook's sheet part to end right after sheetData.
func cutSheet(t *testing.T, data []byte, sheetData string) []byte {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		w, _ := zw.Create(f.Name)
		if f.Name == "xl/worksheets/sheet1.xml" {
			io.WriteString(w, `<worksheet><sheetData>`+sheetData)
			continue
		}
		rc, _ := f.Open()
		io.Copy(w, rc)
		rc.Close()
	}
	zw.Close()
	return buf.Bytes()
}

// TestSharedStringsSpill: shared strings past their memory bound go to a temp file and
// read back the same; past their count bound the workbook is refused.
func TestSharedStringsSpill(t *testing.T) {
	t.Parallel()
	var sst, cells strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sst, "<si><t>string number %d, long enough to fill the memory bound</t></si>", i)
		fmt.Fprintf(&cells, `<row r="%d"><c r="A%d" t="s"><v>%d</v></c></row>`, i+1, i+1, 1999-i)
	}
	data := handWorkbook(t, cells.String(), sst.String(), "", "")
	lim := DefaultLimits
	lim.SharedStringsMemory, lim.TempDir = 10_000, t.TempDir()
	w, err := openWorkbook(bytes.NewReader(data), int64(len(data)), "t.xlsx", lim)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.sst.file == nil || len(w.sst.mem) > 10_000 {
		t.Fatalf("strings not spilled: %d bytes in memory", len(w.sst.mem))
	}
	rows, _ := w.rows(w.sheets[0], 256)
	defer rows.close()
	for i := range 2000 {
		cells, _, err := rows.next()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("string number %d, long enough to fill the memory bound", 1999-i); string(cells[0]) != want {
			t.Fatalf("row %d: %q, want %q", i+1, cells[0], want)
		}
	}
	lim.MaxSharedStrings = 1000
	_, err = openWorkbook(bytes.NewReader(data), int64(len(data)), "t.xlsx", lim)
	var te *Error
	if !errors.As(err, &te) || te.Kind != TooLarge || !strings.Contains(te.Message, "more than 1000 shared strings") {
		t.Fatalf("error %v", err)
	}
}

// TestAppendSerial: Excel's serial dates, every day of its range and times of day, read
// as time.Time reads them.
func TestAppendSerial(t *testing.T) {
	t.Parallel()
	for _, system := range []struct {
		date1904 bool
		epoch    time.Time
	}{{false, time.Date(1899, 12, 30, 0, 0, 0, 0, time.UTC)}, {true, time.Date(1904, 1, 1, 0, 0, 0, 0, time.UTC)}} {
		for day := 61; day < maxSerial; day += 7 {
			f := float64(day) + float64(day%86400)/86400
			got, ok := appendSerial(nil, f, kDatetime, system.date1904)
			when := system.epoch.AddDate(0, 0, day).Add(time.Duration(day%86400) * time.Second)
			if when.Year() > 9999 {
				if ok {
					t.Fatalf("serial %v (1904: %v) is past 9999-12-31, yet read as %q", f, system.date1904, got)
				}
				continue
			}
			if want := when.Format(time.DateTime); !ok || string(got) != want {
				t.Fatalf("serial %v (1904: %v): %q, want %q", f, system.date1904, got, want)
			}
		}
	}
	for _, tc := range []struct {
		f    float64
		k    kind
		want string
	}{{0.5, kText, "12:00:00"}, {0.99998, kText, "23:59:58"}, {0.999999, kText, "00:00:00"}, {45306.99999999, kDatetime, "2024-01-16 00:00:00"}, {1, kDate, "1900-01-01"}, {60, kDate, "1900-02-28"}} {
		if got, _ := appendSerial(nil, tc.f, tc.k, false); string(got) != tc.want {
			t.Errorf("%v: %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestScanTo: the word-at-a-time scans find what bytes.IndexByte finds, and the
// entities and carriage returns before it.
func TestScanTo(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("ab<&\r\x80\xff\x00;")
	for range 20000 {
		b := make([]byte, rng.IntN(90))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := scanTo(b, '<'), bytes.IndexByte(b, '<'); got != want {
			t.Fatalf("scanTo(%q) = %d, want %d", b, got, want)
		}
		end, special := textEnd(b)
		want := bytes.IndexByte(b, '<')
		text := b
		if want >= 0 {
			text = b[:want]
		}
		if end != want || special != bytes.ContainsAny(text, "&\r") {
			t.Fatalf("textEnd(%q) = %d %v, want %d %v", b, end, special, want, !special)
		}
	}
}

// TestUncomputedFormulas: formulas saved without their values (as programs that write
// workbooks without computing them leave them) read as empty cells, and the sheet's
// notes say how many, where the first is and what gives them values.
func TestUncomputedFormulas(t *testing.T) {
	t.Parallel()
	rows := `<row r="1"><c r="A1" t="inlineStr"><is><t>n</t></is></c><c r="B1" t="inlineStr"><is><t>double</t></is></c></row>` +
		`<row r="2"><c r="A2"><v>1</v></c><c r="B2"><f>A2*2</f></c></row>` +
		`<row r="3"><c r="A3"><v>2</v></c><c r="B3"><f>A3*2</f><v>4</v></c></row>` +
		`<row r="4"><c r="A4"><v>3</v></c><c r="AB4"><f>A4*2</f></c></row>`
	for _, tc := range []struct {
		name, rows, note string
	}{
		{"two without a value", rows, "2 formulas have no saved value (the first in B2: the file was saved by a program that does not compute formulas), so their cells read as empty"},
		{"one", `<row r="1"><c r="A1"><v>1</v></c><c r="C1"><f>A1</f></c></row>`, "The formula in C1 has no saved value"},
		{"all computed", `<row r="1"><c r="A1"><v>1</v></c><c r="B1"><f>A1</f><v>1</v></c></row>`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := handWorkbook(t, tc.rows, "", handStyles, "")
			tb, err := Scan(context.Background(), bytes.NewReader(data), int64(len(data)), Request{Name: "f.xlsx", Rows: 5}, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			notes := strings.Join(tb.Sheets[0].Notes, "\n")
			if tc.note == "" && notes != "" || !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q, want %q", notes, tc.note)
			}
		})
	}
}

// TestAllDigits: every byte, alone or among digits, read where eight bytes can be read
// at once (in a buffer with room after it) and where they cannot. FuzzSheetAcrossReads
// found bytes below '0' taken for digits in a buffer with room: Go's | binds as tightly
// as + and -.
func TestAllDigits(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for _, s := range [][]byte{{byte(c)}, {'1', byte(c)}, {byte(c), '9', '9'}, []byte("1234567" + string(rune(c)))[:8]} {
			if c >= 0x80 {
				s[len(s)-1] = byte(c) // the rune's UTF-8 is not the byte
			}
			want := true
			for _, d := range s {
				want = want && d >= '0' && d <= '9'
			}
			roomy := append(append(make([]byte, 0, 64), s...), "0000000000000000"...)[:len(s)]
			tight := append([]byte(nil), s...)[:len(s):len(s)]
			if got := allDigits(roomy); got != want {
				t.Fatalf("allDigits(%q) with room after it = %v", s, got)
			}
			if got := allDigits(tight); got != want {
				t.Fatalf("allDigits(%q) = %v", s, got)
			}
		}
	}
}
