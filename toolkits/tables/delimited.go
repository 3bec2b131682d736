package tables

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"path"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
)

// headBytes is how much of a file its encoding and delimiter are sniffed from.
const headBytes = 64 << 10

// Encodings a delimited file is read in.
const (
	EncUTF8    = "utf-8"
	EncUTF16LE = "utf-16le"
	EncUTF16BE = "utf-16be"
	EncLatin1  = "latin-1" // read as windows-1252, its superset, as browsers do
)

// decode returns r as UTF-8 text and the encoding it was read in: a byte-order mark
// decides; without one, UTF-8 if the head is valid UTF-8, else Latin-1. A head with NUL
// bytes and no UTF-16 mark is binary: not a table.
func decode(r io.ReaderAt, size int64, name string) (io.Reader, string, error) {
	head := make([]byte, min(size, headBytes))
	n, err := r.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, "", err
	}
	head = head[:n]
	src := io.NewSectionReader(r, 0, size)
	switch {
	case bytes.HasPrefix(head, []byte{0xEF, 0xBB, 0xBF}):
		return io.NewSectionReader(r, 3, size-3), EncUTF8, nil
	case bytes.HasPrefix(head, []byte{0xFF, 0xFE}):
		return transform.NewReader(src, unicode.UTF16(unicode.LittleEndian, unicode.ExpectBOM).NewDecoder()), EncUTF16LE, nil
	case bytes.HasPrefix(head, []byte{0xFE, 0xFF}):
		return transform.NewReader(src, unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM).NewDecoder()), EncUTF16BE, nil
	case bytes.IndexByte(head, 0) >= 0:
		what := "binary data"
		switch {
		case bytes.HasPrefix(head, []byte("PK\x03\x04")):
			what = "a zip archive (an .xlsx workbook is one: give it the .xlsx extension)"
		case bytes.HasPrefix(head, []byte("\xD0\xCF\x11\xE0")):
			what = "an old Excel .xls or other Office binary file (save it as .xlsx or CSV)"
		}
		return nil, "", errorf(NotATable, "%s is not a table: its extension says text, but it holds %s.", path.Base(name), what)
	}
	valid := head
	if int64(len(head)) < size {
		// The head may end inside a character: only its complete ones count.
		for i := 0; i < utf8.UTFMax && len(valid) > 0 && !utf8.RuneStart(valid[len(valid)-1]); i++ {
			valid = valid[:len(valid)-1]
		}
		if len(valid) > 0 && !utf8.FullRune(valid[len(valid)-1:]) {
			valid = valid[:len(valid)-1]
		}
	}
	if utf8.Valid(valid) {
		return src, EncUTF8, nil
	}
	return transform.NewReader(src, charmap.Windows1252.NewDecoder()), EncLatin1, nil
}

func scanDelimited(ctx context.Context, r io.ReaderAt, size int64, req Request, lim Limits, t *Table) error {
	text, enc, err := decode(r, size, req.Name)
	if err != nil {
		return err
	}
	t.Encoding = enc
	br := bufio.NewReaderSize(text, headBytes)
	head, _ := br.Peek(headBytes)
	if !utf8.Valid(head) && enc == EncUTF8 {
		head = bytes.ToValidUTF8(head, nil)
	}
	delim := sniffDelimiter(head, t.Format == TSV)
	t.Delimiter = string(delim)
	src := &delimitedReader{r: br, delim: delim, maxBytes: lim.MaxRecordBytes, maxCols: lim.MaxColumns}
	for _, c := range []byte{delim, '"', '\n', '\r'} {
		src.special[c] = true
	}
	t.Sheets = append(t.Sheets, Sheet{})
	return scanSheet(ctx, src, true, req, lim, &t.Sheets[0])
}

// sniffDelimiter picks, of comma, tab, semicolon and pipe, the one that splits the
// head's first lines into the same number of fields most often (more fields winning a
// tie); with none, a comma (one column). tsv prefers a tab that splits anything.
func sniffDelimiter(head []byte, tsv bool) byte {
	lines := splitLines(head, sniffRows)
	if len(lines) > 1 && int64(len(head)) == headBytes {
		lines = lines[:len(lines)-1] // the last may be cut short
	}
	best, bestScore := byte(','), 0
	for _, d := range []byte{',', '\t', ';', '|'} {
		counts := map[int]int{}
		for _, l := range lines {
			if n := countOutsideQuotes(l, d); n > 0 {
				counts[n]++
			}
		}
		mode, freq := 0, 0
		for n, f := range counts {
			if f > freq || f == freq && n > mode {
				mode, freq = n, f
			}
		}
		if freq == 0 {
			continue
		}
		if tsv && d == '\t' {
			return d
		}
		score := freq*1000 + min(mode, 999)
		if score > bestScore {
			best, bestScore = d, score
		}
	}
	return best
}

func splitLines(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 && len(out) < n {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		if l := trim(b[:i]); len(l) > 0 {
			out = append(out, l)
		}
		b = b[i+1:]
	}
	return out
}

func countOutsideQuotes(l []byte, d byte) int {
	n, quoted := 0, false
	for _, c := range l {
		switch {
		case c == '"':
			quoted = !quoted
		case c == d && !quoted:
			n++
		}
	}
	return n
}

// delimitedReader reads RFC 4180 records (quoted fields may hold delimiters, doubled
// quotes and newlines; a stray quote inside a field is kept as text) without ever
// holding more than maxBytes of one record or more than maxCols of its fields.
type delimitedReader struct {
	r        *bufio.Reader
	delim    byte
	maxBytes int
	maxCols  int
	line     int64

	special [256]bool // the delimiter, the quote and line ends

	buf    []byte // the record's kept fields, end to end
	ends   []int  // where each kept field ends in buf
	fields [][]byte
}

func (d *delimitedReader) next() ([][]byte, int, error) {
	for {
		cells, width, err := d.record()
		if err != nil || width > 1 || len(cells) == 1 && len(trim(cells[0])) > 0 {
			return cells, width, err
		}
		// An empty line is no record.
	}
}

func (d *delimitedReader) record() ([][]byte, int, error) {
	d.buf, d.ends = d.buf[:0], d.ends[:0]
	width, total := 1, 0
	quoted, fieldStart, quoteSeen := false, true, false
	d.line++
	start := d.line
	endField := func() {
		if width <= d.maxCols {
			d.ends = append(d.ends, len(d.buf))
		}
		width++
		fieldStart = true
	}
	keep := func(c byte) {
		if width <= d.maxCols {
			d.buf = append(d.buf, c)
		}
	}
	keepRun := func(run []byte) {
		if width <= d.maxCols {
			d.buf = append(d.buf, run...)
		}
	}
	for {
		chunk, err := d.r.ReadSlice('\n')
		total += len(chunk)
		if total > d.maxBytes {
			return nil, 0, errorf(Malformed, "The record starting on line %d is longer than %d bytes; this is not a table this tool reads (is it one very long line, or an unclosed quote?).", start, d.maxBytes)
		}
		if len(chunk) == 0 && err != nil {
			switch {
			case err != io.EOF:
				return nil, 0, readError(err)
			case quoted && !quoteSeen:
				return nil, 0, errorf(Malformed, "A quoted field starting on line %d is never closed.", start)
			case total == 0:
				return nil, 0, io.EOF
			}
			break
		}
		for i := 0; i < len(chunk); i++ {
			c := chunk[i]
			if quoted {
				if quoteSeen {
					quoteSeen = false
					if c == '"' {
						keep('"')
						continue
					}
					quoted = false
				} else if c == '"' {
					quoteSeen = true
					continue
				} else {
					// The quoted run up to the next quote, at once.
					j := bytes.IndexByte(chunk[i:], '"')
					if j < 0 {
						j = len(chunk) - i
					}
					keepRun(chunk[i : i+j])
					i += j - 1
					continue
				}
			}
			if !d.special[c] {
				// The plain run up to the next delimiter, quote or line end, at once.
				j := i + 1
				for j < len(chunk) && !d.special[chunk[j]] {
					j++
				}
				fieldStart = false
				keepRun(chunk[i:j])
				i = j - 1
				continue
			}
			switch c {
			case '"':
				if fieldStart {
					quoted, fieldStart = true, false
					continue
				}
				keep(c)
			case d.delim:
				endField()
			}
		}
		if quoted && !quoteSeen {
			if err == io.EOF {
				return nil, 0, errorf(Malformed, "A quoted field starting on line %d is never closed.", start)
			}
			if err == nil {
				d.line++
			}
			continue // the newline belongs to the quoted field
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			return nil, 0, readError(err)
		}
		break
	}
	if width <= d.maxCols {
		d.ends = append(d.ends, len(d.buf))
	}
	d.fields = d.fields[:0]
	from := 0
	for _, e := range d.ends {
		d.fields = append(d.fields, d.buf[from:e])
		from = e
	}
	return d.fields, width, nil
}

func readError(err error) error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return errorf(Malformed, "The file could not be read: %v", err)
}
