package tables

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"
)

// Fuzz targets for every reader of an uploaded file: each holds, whatever the bytes, that
// the reader ends (bounded by its limits), answers a table or an *Error that says why,
// and never panics; and what it reads does not depend on how its input arrives. Their
// seed corpora are in testdata/fuzz; `make fuzz` runs each for a few seconds.

// fuzzLimits are the default limits, smaller where a fuzzed input could otherwise make
// one run slow without finding more.
var fuzzLimits = func() Limits {
	l := DefaultLimits
	l.MaxFileBytes = 1 << 20
	l.MaxUnzipBytes = 4 << 20
	l.MaxSharedStrings = 1 << 12
	l.SharedStringsMemory = 1 << 16
	return l
}()

// checkScan holds a Scan's outcome to what its API promises: an *Error, or a table
// whose sheets stay within the limits.
func checkScan(t *testing.T, tab *Table, err error, req Request, lim Limits) {
	t.Helper()
	if err != nil {
		if e := (*Error)(nil); !errors.As(err, &e) || e.Message == "" {
			t.Fatalf("an error that is not an *Error with a message: %T %v", err, err)
		}
		return
	}
	for _, sh := range tab.Sheets {
		if len(sh.Columns) > lim.MaxColumns || len(sh.Data) > min(req.Rows, lim.MaxRows) || sh.Rows < int64(len(sh.Data)) {
			t.Fatalf("sheet %q: %d columns, %d rows shown of %d", sh.Name, len(sh.Columns), len(sh.Data), sh.Rows)
		}
		for _, c := range sh.Columns {
			if c.Distinct > lim.MaxDistinct || len(c.Top) > lim.MaxTop || c.Nulls < 0 || c.Nulls > sh.Rows {
				t.Fatalf("column %q: %+v of %d rows", c.Name, c, sh.Rows)
			}
		}
	}
}

// watchdog panics, with every goroutine's stack, when what it watches has not ended
// within a minute (a few milliseconds' work on a busy machine): the fuzzer has no such
// bound, and a reader that never ends is a finding.
func watchdog() (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(time.Minute):
			panic("a reader did not end within a minute")
		}
	}()
	return func() { close(done) }
}

func fuzzScan(t *testing.T, name string, data []byte, lim Limits) (*Table, error) {
	defer watchdog()()
	req := Request{Name: name, Rows: 20, AllSheets: true}
	tab, err := Scan(context.Background(), bytes.NewReader(data), int64(len(data)), req, lim)
	checkScan(t, tab, err, req, lim)
	return tab, err
}

// FuzzDelimited: a CSV or TSV file of any bytes (any encoding, quotes, line ends).
func FuzzDelimited(f *testing.F) {
	f.Add([]byte("id,name,when\n1,\"a, b\",2024-01-02\n2,\"say \"\"hi\"\"\",\n"), false)
	f.Add([]byte("a\tb\r\n1\t2\r\n"), true)
	f.Add([]byte("\xff\xfea\x00;\x00b\x00\n\x001\x00;\x002\x00"), false)
	f.Add([]byte("x;y\n\"open\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, tsv bool) {
		name := "f.csv"
		if tsv {
			name = "f.tsv"
		}
		fuzzScan(t, name, data, fuzzLimits)
	})
}

// FuzzJSONLines: a JSON Lines file of any bytes.
func FuzzJSONLines(f *testing.F) {
	f.Add([]byte("{\"a\": 1, \"b\": \"x\"}\n{\"b\": null, \"c\": [1, {\"d\": 2}]}\n"))
	f.Add([]byte("{\"a\": 1}\n[1, 2]\n"))
	f.Add([]byte("\xef\xbb\xbf{\"\\u00e9\": 1e400}\r\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzScan(t, "f.jsonl", data, fuzzLimits)
	})
}

// FuzzDecode: the encoding a delimited file is read in. What comes out is UTF-8 text; a
// file that is UTF-8 already comes out as it is (but for its byte-order mark).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("plain text é\n"))
	f.Add([]byte("\xef\xbb\xbfwith a mark"))
	f.Add([]byte("\xfe\xff\x00a\x00b"))
	f.Add([]byte("caf\xe9 cr\xe8me"))
	f.Add([]byte("a\x00b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, enc, err := decode(bytes.NewReader(data), int64(len(data)), "f.csv")
		if err != nil {
			if e := (*Error)(nil); !errors.As(err, &e) || e.Kind != NotATable {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		switch enc {
		case EncUTF8:
			if in := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")); utf8.Valid(in) && !bytes.Equal(out, in) {
				t.Fatalf("UTF-8 read as %q", out)
			}
		case EncLatin1, EncUTF16LE, EncUTF16BE:
			if !utf8.Valid(out) {
				t.Fatalf("%s read as text that is not UTF-8: %q", enc, out)
			}
		default:
			t.Fatalf("encoding %q", enc)
		}
	})
}

// FuzzXMLScan: the XML scanner reads any bytes to the same tokens whatever its reads
// return: the input whole, or cut at any point, or a byte at a time.
func FuzzXMLScan(f *testing.F) {
	f.Add([]byte(`<?xml version="1.0"?><a x="1" y='>'><!-- c --><b/>t &amp; u<![CDATA[<raw>]]></a>`), uint16(7))
	f.Add([]byte(`<row r="1"><c r="A1" t="s"><v>0</v></c></row>`), uint16(20))
	f.Add([]byte(`<x:t xml:space="preserve">&#x20AC;&#233;&lt;</x:t><!DOCTYPE x>`), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		at := int(cut) % (len(data) + 1)
		whole, wholeErr := xmlTokens(bytes.NewReader(data))
		for how, r := range map[string]io.Reader{
			"cut":          io.MultiReader(bytes.NewReader(data[:at]), bytes.NewReader(data[at:])),
			"byte by byte": iotest.OneByteReader(bytes.NewReader(data)),
		} {
			got, err := xmlTokens(r)
			if (err == nil) != (wholeErr == nil) || got != whole {
				t.Fatalf("%s at %d:\n got %q, %v\nwant %q, %v", how, at, got, err, whole, wholeErr)
			}
		}
	})
}

// xmlTokens is what the scanner reads of r: each token's kind and parts, text pieces
// joined (a reader may split text anywhere), unescaped.
func xmlTokens(r io.Reader) (string, error) {
	sc := newXMLScanner(r)
	var b strings.Builder
	var text []byte
	flush := func() {
		if len(text) > 0 {
			b.WriteString("T" + string(appendText(nil, text)) + "\x00")
			text = text[:0]
		}
	}
	for range 1 << 16 {
		tok, err := sc.next()
		if err != nil {
			flush()
			if err == io.EOF {
				err = nil
			}
			return b.String(), err
		}
		if tok.kind == tokText {
			text = append(text, tok.text...)
			continue
		}
		flush()
		b.WriteString(string(rune('0'+tok.kind)) + string(tok.name) + "|" + string(tok.attrs) + "|" + string(tok.text))
		if tok.selfClose {
			b.WriteString("/")
		}
		b.WriteByte(0)
	}
	return b.String(), errors.New("too many tokens")
}

// workbookParts are the parts of a small workbook: two sheets, shared strings, styles
// with a date format.
var workbookParts = map[string]string{
	"[Content_Types].xml": `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`,
	"xl/workbook.xml": `<?xml version="1.0"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">` +
		`<workbookPr date1904="false"/><sheets><sheet name="Data" sheetId="1" r:id="rId1"/><sheet name="More" sheetId="2" r:id="rId2"/></sheets></workbook>`,
	"xl/_rels/workbook.xml.rels": `<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">` +
		`<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/>` +
		`<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="/xl/worksheets/sheet2.xml"/>` +
		`<Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="sharedStrings.xml"/>` +
		`<Relationship Id="rId4" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/></Relationships>`,
	"xl/sharedStrings.xml": `<?xml version="1.0"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="3" uniqueCount="3">` +
		`<si><t>name</t></si><si><r><t>rich </t></r><r><t>text</t></r></si><si><t xml:space="preserve"> a &amp; b </t></si></sst>`,
	"xl/styles.xml": `<?xml version="1.0"?><styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><numFmts count="1"><numFmt numFmtId="164" formatCode="yyyy-mm-dd"/></numFmts>` +
		`<cellXfs count="3"><xf numFmtId="0"/><xf numFmtId="164" applyNumberFormat="1"/><xf numFmtId="22"/></cellXfs></styleSheet>`,
	"xl/worksheets/sheet1.xml": `<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>` +
		`<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="inlineStr"><is><t>when</t></is></c><c r="C1" t="str"><v>sum</v></c></row>` +
		`<row r="2"><c r="A2" t="s"><v>1</v></c><c r="B2" s="1"><v>45000</v></c><c r="C2"><f>1+1</f><v>2</v></c></row>` +
		`<row r="4"><c r="A4" t="s"><v>2</v></c><c r="B4" s="2"><v>45000.5</v></c><c r="C4" t="b"><v>1</v></c><c r="E4" t="e"><v>#DIV/0!</v></c></row>` +
		`</sheetData></worksheet>`,
	"xl/worksheets/sheet2.xml": `<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row><c><v>1.5E+300</v></c><c t="n"><v>-0</v></c></row></sheetData></worksheet>`,
}

// workbookZip is the small workbook with the given parts replaced.
func workbookZip(t testing.TB, replace map[string][]byte) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"[Content_Types].xml", "xl/workbook.xml", "xl/_rels/workbook.xml.rels", "xl/sharedStrings.xml", "xl/styles.xml", "xl/worksheets/sheet1.xml", "xl/worksheets/sheet2.xml"} {
		body, ok := replace[name]
		if !ok {
			body = []byte(workbookParts[name])
		}
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkSheetCopies holds SheetCSVs to Scan: the same workbook read both ways fails
// both ways, or gives each sheet's rows alike (the header row, then as many data rows
// as the description counts).
func checkSheetCopies(t *testing.T, data []byte, tab *Table, scanErr error) {
	t.Helper()
	defer watchdog()()
	copies, err := SheetCSVs(context.Background(), bytes.NewReader(data), int64(len(data)), "f.xlsx", fuzzLimits, 1<<20)
	if err != nil {
		if e := (*Error)(nil); !errors.As(err, &e) {
			t.Fatalf("copies: %T %v", err, err)
		}
		return
	}
	if scanErr != nil {
		return // Scan reads only what it describes: it may fail where a copy does not
	}
	for i, cp := range copies {
		if cp.Truncated || i >= len(tab.Sheets) || tab.Sheets[i].Name != cp.Sheet {
			continue
		}
		sh := tab.Sheets[i]
		rows := int64(bytes.Count(cp.CSV, []byte("\n")))
		if sh.Header {
			rows--
		}
		if strings.Contains(string(cp.CSV), "\"") {
			continue // a quoted field may hold a line end
		}
		if rows != sh.Rows {
			t.Fatalf("sheet %q: %d rows described, %d in its copy:\n%q", sh.Name, sh.Rows, rows, cp.CSV)
		}
	}
}

// FuzzSheetRows: a worksheet's XML of any bytes, in a workbook otherwise whole.
func FuzzSheetRows(f *testing.F) {
	f.Add([]byte(workbookParts["xl/worksheets/sheet1.xml"]))
	f.Add([]byte(workbookParts["xl/worksheets/sheet2.xml"]))
	f.Add([]byte(`<worksheet><sheetData><row r="3" spans="1:2"><c r="B3" t="inlineStr"><is><r><t>a</t></r><t>b</t></is></c><c r="XFD3"><v>1</v></c></row><row r="2"/></sheetData></worksheet>`))
	f.Add([]byte(`<x:worksheet xmlns:x="s"><x:sheetData><x:row><x:c t="d"><x:v>2024-01-02T03:04:05</x:v></x:c><x:c s="999"><x:v>1e5</x:v></x:c></x:row></x:sheetData></x:worksheet>`))
	f.Fuzz(func(t *testing.T, sheet []byte) {
		data := workbookZip(t, map[string][]byte{"xl/worksheets/sheet1.xml": sheet})
		tab, err := fuzzScan(t, "f.xlsx", data, fuzzLimits)
		checkSheetCopies(t, data, tab, err)
	})
}

// FuzzWorkbook: what describes a workbook (its sheets, their relationships, its cell
// styles, its shared strings), each part of any bytes.
func FuzzWorkbook(f *testing.F) {
	p := func(name string) []byte { return []byte(workbookParts[name]) }
	f.Add(p("xl/workbook.xml"), p("xl/_rels/workbook.xml.rels"), p("xl/styles.xml"), p("xl/sharedStrings.xml"))
	f.Add([]byte(`<workbook><workbookPr date1904="1"/><sheets><sheet name="a&amp;b" r:id="rId2"/><sheet name="" r:id="nope"/></sheets></workbook>`),
		[]byte(`<Relationships><Relationship Id="rId2" Type="/worksheet" Target="../../etc/passwd"/><Relationship Id="rId3" Type="x/sharedStrings" Target="worksheets/sheet1.xml"/></Relationships>`),
		[]byte(`<styleSheet><numFmts><numFmt numFmtId="200" formatCode="[h]:mm;@&quot;d&quot;"/></numFmts><cellXfs><xf numFmtId="200"/><xf numFmtId="-1"/></cellXfs></styleSheet>`),
		[]byte(`<sst><si><t>_x0041_&#0;</t><rPh><t>x</t></rPh></si><si></si></sst>`))
	f.Fuzz(func(t *testing.T, workbook, rels, styles, sst []byte) {
		data := workbookZip(t, map[string][]byte{"xl/workbook.xml": workbook, "xl/_rels/workbook.xml.rels": rels, "xl/styles.xml": styles, "xl/sharedStrings.xml": sst})
		tab, err := fuzzScan(t, "f.xlsx", data, fuzzLimits)
		checkSheetCopies(t, data, tab, err)
	})
}

// FuzzXLSX: a workbook's file of any bytes: the zip itself (headers, sizes, methods,
// checksums, DEFLATE streams).
func FuzzXLSX(f *testing.F) {
	f.Add(workbookZip(f, nil))
	f.Add([]byte("PK\x05\x06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := fuzzScan(t, "f.xlsx", data, fuzzLimits)
		checkSheetCopies(t, data, tab, err)
	})
}

// sheetCells reads every row of w's sheets, as text; and whether a markup was longer
// than the reading's room.
func sheetCells(w *workbook) (cells string, tooLong bool, err error) {
	var b strings.Builder
	for _, s := range w.sheets {
		rows, err := w.rows(s, maxExcelCol)
		if err != nil || rows == nil {
			return b.String(), false, err
		}
		for n := 0; ; n++ {
			row, width, err := rows.next()
			if err == io.EOF {
				break
			} else if err != nil || n > 1<<20 {
				rows.close()
				return b.String(), err == errXMLTooLong, err
			}
			b.WriteString(strconv.Itoa(width))
			for _, c := range row {
				b.WriteString("|" + string(c))
			}
			b.WriteByte('\n')
		}
		rows.close()
	}
	return b.String(), false, nil
}

// FuzzSheetAcrossReads: a worksheet's XML of any bytes reads to the same rows whether
// it comes in the reader's buffers (whole, for an input this small) or in buffers of a
// few bytes, where every tag, value and reference may be cut by a refill: unless a
// markup is longer than the small reading's room, which it refuses.
func FuzzSheetAcrossReads(f *testing.F) {
	f.Add([]byte(workbookParts["xl/worksheets/sheet1.xml"]), uint8(16))
	f.Add([]byte(`<worksheet><sheetData><row r="1"><c r="A1"><v>1.25</v></c><c r="AB1" t="inlineStr"><is><t>x &amp; y</t></is></c></row><row r="3"><c r="C3" t="b"><v>0</v></c></row></sheetData></worksheet>`), uint8(3))
	f.Fuzz(func(t *testing.T, sheet []byte, size uint8) {
		defer watchdog()()
		data := workbookZip(t, map[string][]byte{"xl/worksheets/sheet1.xml": sheet})
		w, err := openWorkbook(bytes.NewReader(data), int64(len(data)), "f.xlsx", fuzzLimits)
		if err != nil {
			return
		}
		defer w.close()
		whole, _, wholeErr := sheetCells(w)
		w.ahead.size, w.ahead.room = 1+int(size%64), 128+int(size)
		small, tooLong, smallErr := sheetCells(w)
		if tooLong {
			return
		}
		if small != whole || (smallErr == nil) != (wholeErr == nil) {
			t.Fatalf("in buffers of %d bytes:\n%q, %v\nwhole:\n%q, %v", w.ahead.size, small, smallErr, whole, wholeErr)
		}
	})
}
