package tables

import (
	"archive/zip"
	"bufio"
	"bytes"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// workbook is an opened .xlsx: its parts, its sheets, what its cell styles say of dates,
// and its shared strings. Only the sheets' rows are read after opening, each once,
// streaming (sheetRows).
type workbook struct {
	name     string // the file's base name, for messages
	lim      Limits
	parts    map[string]*zip.File // by lower-case name
	sheets   []sheetRef
	date1904 bool
	styles   []kind // per cell style: kDate, kDatetime, kText (a time of day) or kNull
	sst      sharedStrings
	// ahead is how a sheet's XML is read: in buffers of this many bytes, after room for
	// the longest tag (readAheadBytes and xmlScanBytes; a test reads it in small ones).
	ahead struct{ size, room int }
}

// sheetRef is a sheet and its part; "" for one that holds no cells (a chart sheet).
type sheetRef struct {
	name, part string
}

// Bounds of a workbook's metadata: Excel's own maxima, and beyond any real workbook.
const (
	maxCellStyles = 65536
	maxNumFmts    = 4096
	maxSheetNames = 4096
	maxExcelRow   = 1 << 20
	maxExcelCol   = 1 << 14
)

// What is kept of a name (a sheet's, a number format's code, a relationship's id or
// type: Excel's are at most 255 characters) and of a part's path: metadata held is
// bounded by these times the counts above.
const (
	maxNameBytes = 255
	maxPathBytes = 1024
)

// cut is b, at most n bytes of it.
func cut(b []byte, n int) []byte { return b[:min(len(b), n)] }

// Relationship types a workbook's parts are found by.
const (
	relWorksheet     = "/worksheet"
	relChartsheet    = "/chartsheet"
	relSharedStrings = "/sharedStrings"
	relStyles        = "/styles"
)

// readWorkbook reads what describes a workbook (zr is checked): its sheets and their
// parts, its date system, its cell styles, its shared strings.
func readWorkbook(zr *zip.Reader, name string, lim Limits) (*workbook, error) {
	w := &workbook{name: name, lim: lim, parts: make(map[string]*zip.File, len(zr.File))}
	w.ahead.size, w.ahead.room = readAheadBytes, xmlScanBytes
	for _, f := range zr.File {
		w.parts[strings.ToLower(f.Name)] = f
	}
	rels, err := w.relationships()
	if err != nil {
		return nil, err
	}
	if err := w.readSheets(rels); err != nil {
		return nil, err
	}
	if err := w.readStyles(rels.find(relStyles, "xl/styles.xml")); err != nil {
		return nil, err
	}
	if err := w.readSharedStrings(rels.find(relSharedStrings, "xl/sharedstrings.xml")); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *workbook) close() { w.sst.close() }

// scan reads part with fn called for each token; a part that is not there is no token.
func (w *workbook) scan(part string, fn func(t *xmlToken) error) error {
	f := w.parts[strings.ToLower(part)]
	if f == nil {
		return nil
	}
	rc, err := f.Open()
	if err != nil {
		return w.malformed(part, err)
	}
	defer rc.Close()
	sc := newXMLScanner(rc)
	for {
		t, err := sc.next()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return w.malformed(part, err)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
}

func (w *workbook) malformed(part string, err error) error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return errorf(Malformed, "%s could not be read as a workbook: its part %s is broken (%v).", w.name, part, err)
}

// relations are the workbook's relationships by id, with their types.
type relations map[string]relation

type relation struct{ typ, part string }

// find is the part of the first relationship of type typ (a suffix of its URI), or def.
func (r relations) find(typ, def string) string {
	for _, rel := range r {
		if strings.HasSuffix(rel.typ, typ) {
			return rel.part
		}
	}
	return def
}

func (w *workbook) relationships() (relations, error) {
	rels := relations{}
	err := w.scan("xl/_rels/workbook.xml.rels", func(t *xmlToken) error {
		if t.kind != tokStart || string(t.name) != "Relationship" || len(rels) >= maxSheetNames+16 {
			return nil
		}
		var id, typ, target []byte
		external := false
		for a := t.attrs; ; {
			n, v, rest, ok := nextAttr(a)
			if !ok {
				break
			}
			switch string(n) {
			case "Id":
				id = cut(appendUnescaped(nil, v), maxNameBytes)
			case "Type":
				typ = cut(v, maxNameBytes)
			case "Target":
				target = cut(appendUnescaped(nil, v), maxPathBytes)
			case "TargetMode":
				external = string(v) == "External"
			}
			a = rest
		}
		if !external && len(id) > 0 {
			rels[string(id)] = relation{typ: string(typ), part: partPath(string(target))}
		}
		return nil
	})
	return rels, err
}

// partPath is a relationship's target as a part's name: absolute, or relative to xl/.
func partPath(target string) string {
	if strings.HasPrefix(target, "/") {
		return strings.TrimPrefix(path.Clean(target), "/")
	}
	return path.Join("xl", target)
}

func (w *workbook) readSheets(rels relations) error {
	more := 0
	err := w.scan("xl/workbook.xml", func(t *xmlToken) error {
		if t.kind != tokStart {
			return nil
		}
		switch string(t.name) {
		case "workbookPr":
			v := string(attr(t.attrs, "date1904"))
			w.date1904 = v == "1" || v == "true"
		case "sheet":
			if len(w.sheets) == maxSheetNames {
				more++
				return nil
			}
			var name, id, sheetID []byte
			for a := t.attrs; ; {
				n, v, rest, ok := nextAttr(a)
				if !ok {
					break
				}
				switch string(n) {
				case "name":
					name = appendUnescaped(nil, v)
				case "id":
					id = cut(appendUnescaped(nil, v), maxNameBytes)
				case "sheetId":
					sheetID = cut(v, 16)
				}
				a = rest
			}
			s := sheetRef{name: clip(name, maxNameBytes)}
			if rel, ok := rels[string(id)]; ok {
				if !strings.HasSuffix(rel.typ, relChartsheet) {
					s.part = rel.part
				}
			} else if p := "xl/worksheets/sheet" + string(sheetID) + ".xml"; w.parts[p] != nil {
				s.part = p
			}
			w.sheets = append(w.sheets, s)
		}
		return nil
	})
	if more > 0 && err == nil {
		return errorf(TooLarge, "%s has more than %d sheets; it was not read.", w.name, maxSheetNames)
	}
	return err
}

// readStyles keeps of the cell styles (cellXfs) what their number formats say of time:
// a date, a date and time, a time of day (dateKind).
func (w *workbook) readStyles(part string) error {
	custom := map[int]string{}
	var ids []int
	inCellXfs := false
	err := w.scan(part, func(t *xmlToken) error {
		switch {
		case t.kind == tokEnd && string(t.name) == "cellXfs":
			inCellXfs = false
		case t.kind != tokStart:
		case string(t.name) == "numFmt" && len(custom) < maxNumFmts:
			id, err := strconv.Atoi(string(attr(t.attrs, "numFmtId")))
			if err == nil {
				custom[id] = string(cut(appendUnescaped(nil, attr(t.attrs, "formatCode")), maxNameBytes))
			}
		case string(t.name) == "cellXfs":
			inCellXfs = !t.selfClose
		case string(t.name) == "xf" && inCellXfs && len(ids) < maxCellStyles:
			id, _ := strconv.Atoi(string(attr(t.attrs, "numFmtId")))
			ids = append(ids, id)
		}
		return nil
	})
	w.styles = make([]kind, len(ids))
	for i, id := range ids {
		code, ok := custom[id]
		w.styles[i] = dateKind(id, code, ok)
	}
	return err
}

// readSharedStrings reads the strings cells share (<si>: a <t>, or runs of them; the
// phonetic runs <rPh> are not the text).
func (w *workbook) readSharedStrings(part string) error {
	w.sst = sharedStrings{maxCount: w.lim.MaxSharedStrings, memBytes: w.lim.SharedStringsMemory, tempDir: w.lim.TempDir}
	if f := w.parts[strings.ToLower(part)]; f != nil {
		w.sst.mem = make([]byte, 0, min(f.UncompressedSize64, uint64(max(w.sst.memBytes, 0))))
	}
	var text []byte
	inSI, inT, inRPh := false, false, false
	err := w.scan(part, func(t *xmlToken) error {
		switch t.kind {
		case tokStart:
			switch string(t.name) {
			case "sst":
				if n, err := strconv.Atoi(string(attr(t.attrs, "uniqueCount"))); err == nil && n > 0 {
					w.sst.ends = make([]uint32, 0, min(n, w.sst.maxCount))
				}
			case "si":
				if t.selfClose {
					return w.sst.add(nil, w.name)
				}
				inSI, text = true, text[:0]
			case "t":
				inT = inSI && !inRPh && !t.selfClose
			case "rPh":
				inRPh = !t.selfClose
			}
		case tokEnd:
			switch string(t.name) {
			case "si":
				inSI = false
				return w.sst.add(text, w.name)
			case "t":
				inT = false
			case "rPh":
				inRPh = false
			}
		case tokText, tokCDATA:
			if !inT {
				return nil
			}
			if t.kind == tokText {
				text = appendText(text, t.text)
			} else {
				text = append(text, t.text...)
			}
			if len(text) > w.lim.MaxRecordBytes {
				return errorf(Malformed, "%s holds a string longer than %d bytes; it was not read.", w.name, w.lim.MaxRecordBytes)
			}
		}
		return nil
	})
	if err == nil {
		err = w.sst.flush()
	}
	return err
}

// sharedStrings are a workbook's shared strings, end to end: the first memBytes of them
// in memory, the rest in a temp file (unlinked at once), so a workbook of many long
// strings is read in bounded memory; at most maxCount of them.
type sharedStrings struct {
	maxCount int
	memBytes int
	tempDir  string

	mem      []byte
	ends     []uint32 // where each string ends, counted from the first string's start
	file     *os.File // strings from fileBase on
	fileW    *bufio.Writer
	fileBase uint32
	total    uint64
	scratch  []byte
}

func (s *sharedStrings) add(text []byte, name string) error {
	if len(s.ends) >= s.maxCount {
		return errorf(TooLarge, "%s holds more than %d shared strings; it was not read.", name, s.maxCount)
	}
	var b []byte
	if bytes.Contains(text, []byte("_x")) {
		b = appendOOXMLText(s.scratch[:0], text)
		s.scratch = b
	} else {
		b = text
	}
	if s.total+uint64(len(b)) > 1<<32-1 {
		return errorf(TooLarge, "%s's shared strings take more than 4 GiB; it was not read.", name)
	}
	if s.file == nil && len(s.mem)+len(b) <= s.memBytes {
		s.mem = append(s.mem, b...)
	} else {
		if s.file == nil {
			f, err := os.CreateTemp(s.tempDir, "sandchat-sst-*")
			if err != nil {
				return err
			}
			os.Remove(f.Name())
			s.file, s.fileW, s.fileBase = f, bufio.NewWriterSize(f, 64<<10), uint32(s.total)
		}
		if _, err := s.fileW.Write(b); err != nil {
			return err
		}
	}
	s.total += uint64(len(b))
	s.ends = append(s.ends, uint32(s.total))
	return nil
}

func (s *sharedStrings) flush() error {
	if s.fileW == nil {
		return nil
	}
	return s.fileW.Flush()
}

// get is string i, valid until the next call; ok is false for no such string.
func (s *sharedStrings) get(i int) ([]byte, bool, error) {
	if i < 0 || i >= len(s.ends) {
		return nil, false, nil
	}
	var start uint32
	if i > 0 {
		start = s.ends[i-1]
	}
	end := s.ends[i]
	if s.file == nil || end <= s.fileBase {
		return s.mem[start:end], true, nil
	}
	n := int(end - start)
	if cap(s.scratch) < n {
		s.scratch = make([]byte, n)
	}
	b := s.scratch[:n]
	if _, err := s.file.ReadAt(b, int64(start-s.fileBase)); err != nil {
		return nil, false, err
	}
	return b, true, nil
}

// inMemory is string i where it is held in memory; ok is false for no such string, or
// one in the temp file.
func (s *sharedStrings) inMemory(i int) (str []byte, ok bool) {
	if i < 0 || i >= len(s.ends) || s.file != nil && s.ends[i] > s.fileBase {
		return nil, false
	}
	start := uint32(0)
	if i > 0 {
		start = s.ends[i-1]
	}
	return s.mem[start:s.ends[i]:s.ends[i]], true
}

func (s *sharedStrings) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}
