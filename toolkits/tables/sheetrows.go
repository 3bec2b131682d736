package tables

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// sheetRows reads a worksheet's rows (<row>, its cells <c r= t= s=>, their <v> or inline
// <is><t>), one at a time, as a records source. A cell's value is as Excel shows it
// plainly: a shared or inline string, TRUE or FALSE, an error (#DIV/0!), a number as
// stored (to Excel's 15 significant digits), or, when its style's number format shows a
// date or a time, that date or time in ISO form. A formula is its cached value. Rows
// missing between two (r= skips them) are empty rows, as are rows without cells; cells
// missing in a row are empty, and a row ends at its last cell with a value.
type sheetRows struct {
	wb       *workbook
	sheet    string
	sc       *xmlScanner
	ra       *readAhead
	part     io.ReadCloser
	maxCols  int
	maxBytes int

	row  int  // the number of the last row read
	gap  int  // empty rows to give before the held row
	held bool // a row was read and waits for the gap to be given
	done bool

	// The row's cells, as they are read: values shown as the XML holds them (a plain
	// number, a string without escapes) in place in the scanner's buffer, shared
	// strings in place where the workbook holds them, the others in buf. A value stays
	// valid while buf grows: append leaves the old array as it was.
	cells   [][]byte
	cellsKn []known // what the profile is told of them, one a cell
	buf     []byte
	inScan  []int32 // the cells in the scanner's buffer, copied into buf before it moves
	size    int     // the kept cells' bytes
	width   int     // the row's last column with a value

	v, is       []byte // the cell being read: its <v>, its inline string
	vBuf, isBuf []byte // where they are kept when not read in place

	// Writers give each cell of a column the same tag but for its reference: a tag
	// that is its column's last one with the reference of the next column in the row,
	// is read by comparing words (sameTag).
	rowRef, rowMask uint64    // the row's number as written and a quote, in a word
	rowRefN         int       // its bytes; 0 when the row has no number
	tags            []tagMemo // by column

	// Formulas without a saved value (a file written by a program that does not compute
	// them) read as empty cells: how many, and where the first one is, for a note.
	uncomputed      int
	firstUncomputed string
}

// tagMemo is a column's last cell tag: its start, <c r=" and the column's letters, and
// what followed its reference, at most 16 bytes; as little-endian words, each with the
// mask of its bytes; and what they say.
type tagMemo struct {
	open, openMask uint64
	openN          int
	w1, w2, m1, m2 uint64
	n              int // 0: none
	typ            cellType
	style          int
	selfClose      bool
}

// maxTagMemos is how many columns' tags are remembered: those of two letters at most.
const maxTagMemos = 26 + 26*26 + 1

// readAheadBuffers: a sheet's XML is unpacked this far ahead of its reading.
const (
	readAheadBytes   = 256 << 10
	readAheadBuffers = 4
)

// rows opens sheet s for reading, keeping the first maxCols cells of each row.
func (w *workbook) rows(s sheetRef, maxCols int) (*sheetRows, error) {
	f := w.parts[strings.ToLower(s.part)]
	if f == nil {
		return nil, nil
	}
	rc, err := f.Open()
	if err != nil {
		return nil, w.malformed(s.part, err)
	}
	ra := newReadAhead(rc, w.ahead.size, w.ahead.room, readAheadBuffers)
	return &sheetRows{wb: w, sheet: s.name, sc: newAheadScanner(ra), ra: ra, part: rc, maxCols: maxCols, maxBytes: w.lim.MaxRecordBytes}, nil
}

func (x *sheetRows) close() {
	x.ra.Close()
	x.part.Close()
}

func (x *sheetRows) next() ([][]byte, int, error) {
	for {
		if x.gap > 0 {
			x.gap--
			return nil, 0, nil
		}
		if x.held {
			x.held = false
			return x.cells, x.width, nil
		}
		if x.done {
			return nil, 0, io.EOF
		}
		if err := x.readRow(); err != nil {
			return nil, 0, err
		}
	}
}

func (x *sheetRows) malformed(format string, args ...any) error {
	return errorf(Malformed, "Sheet %q could not be read: "+format, append([]any{x.sheet}, args...)...)
}

func (x *sheetRows) readErr(err error) error {
	if err == io.EOF {
		x.done = true
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	return x.malformed("%v", err)
}

// readRow reads the next <row> and holds it, or marks the end of the sheet.
func (x *sheetRows) readRow() error {
	attrs, selfClose, ok := x.plainRow()
	for !ok {
		t, err := x.sc.next()
		if err != nil {
			return x.readErr(err)
		}
		if t.kind == tokStart && string(t.name) == "row" {
			attrs, selfClose, ok = t.attrs, t.selfClose, true
		}
		if t.kind == tokEnd && string(t.name) == "sheetData" {
			x.done = true
			return nil
		}
	}
	n := x.row + 1
	x.rowRefN = 0
	if r := rowNumber(attrs); r != nil {
		var ok bool
		if n, ok = atoiBytes(r); !ok || n < 1 || n > maxExcelRow {
			return x.malformed("a row number %q is not one of Excel's (1 to %d).", clip(r, 32), maxExcelRow)
		}
		if len(r) < 8 {
			x.rowRef, x.rowMask, x.rowRefN = wordOf(r)|'"'<<(8*len(r)), byteMask(len(r)+1), len(r)+1
		}
	}
	if n > x.row {
		x.gap = n - x.row - 1
	}
	x.row, x.held = n, true
	x.cells, x.cellsKn, x.buf, x.inScan, x.size, x.width = x.cells[:0], x.cellsKn[:0], x.buf[:0], x.inScan[:0], 0, 0
	if selfClose {
		return nil
	}
	col := 0
	for {
		if err := x.plainCells(&col); err != nil {
			return err
		}
		if b := x.sc.buf[x.sc.pos:x.sc.end]; bytes.HasPrefix(b, rowEnd) {
			x.sc.pos += len(rowEnd)
			break
		}
		x.own() // the scanner may move on
		t, err := x.sc.next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return x.readErr(err)
		}
		if t.kind == tokEnd && string(t.name) == "row" {
			break
		}
		if t.kind != tokStart || string(t.name) != "c" {
			continue
		}
		var typ, style []byte
		ref := false
		for a := t.attrs; ; {
			name, v, rest, ok := nextAttr(a)
			if !ok {
				break
			}
			switch string(name) {
			case "r":
				c, ok := cellColumn(v)
				if !ok {
					return x.malformed("a cell reference %q is not one of Excel's.", clip(v, 32))
				}
				col, ref = c, true
			case "t":
				typ = v
			case "s":
				style = v
			}
			a = rest
		}
		if !ref {
			if col++; col > maxExcelCol {
				return x.malformed("row %d holds more than Excel's %d columns.", x.row, maxExcelCol)
			}
		}
		if t.selfClose {
			continue
		}
		// typ and style point into the scanner's buffer, which reading moves.
		if err := x.readCell(col, typeOf(typ), styleOf(style)); err != nil {
			return err
		}
	}
	for n := min(x.width, x.maxCols); len(x.cells) < n; {
		x.cells, x.cellsKn = append(x.cells, nil), append(x.cellsKn, known{}) // a column past the last kept
	}
	return nil
}

// uncomputedNote says, when the sheet holds formulas without a saved value, that those
// cells read as empty and what gives them values; "" otherwise.
func (x *sheetRows) uncomputedNote() string {
	switch x.uncomputed {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("The formula in %s has no saved value (the file was saved by a program that does not compute formulas), so it reads as empty; open the file in a spreadsheet program and save it to keep its value.", x.firstUncomputed)
	}
	return fmt.Sprintf("%d formulas have no saved value (the first in %s: the file was saved by a program that does not compute formulas), so their cells read as empty; open the file in a spreadsheet program and save it to keep their values.", x.uncomputed, x.firstUncomputed)
}

// columnName is Excel's name of column col (from 1): A, Z, AA.
func columnName(col int) string {
	var b []byte
	for ; col > 0; col = (col - 1) / 26 {
		b = append([]byte{byte('A' + (col-1)%26)}, b...)
	}
	return string(b)
}

// knowns says what the cells next gave last hold, one a cell.
func (x *sheetRows) knowns() []known { return x.cellsKn }

var rowEnd = []byte("</row>")

// rowNumber is a <row> tag's r attribute (attr), read at once when it comes first.
func rowNumber(attrs []byte) []byte {
	if len(attrs) > 4 && string(attrs[:4]) == ` r="` {
		if k := scanTo(attrs[4:], '"'); k >= 0 {
			return attrs[4 : 4+k]
		}
	}
	return attr(attrs, "r")
}

// plainRow reads the <row> tag at the scanner's position when it is whole in its
// buffer, as the general reading would; ok is false when there is none.
func (x *sheetRows) plainRow() (attrs []byte, selfClose, ok bool) {
	sc := x.sc
	b := sc.buf[sc.pos:sc.end]
	skip := 0 // the line ends and indents between rows, text the general reading skips
	for skip < len(b) && isSpace(b[skip]) {
		skip++
	}
	b = b[skip:]
	if len(b) < 5 || string(b[:4]) != "<row" || b[4] != ' ' && b[4] != '>' && b[4] != '/' {
		return nil, false, false
	}
	i := tagEnd(b, 4)
	if i < 0 {
		return nil, false, false
	}
	sc.pos += skip + i + 1
	attrs, selfClose = b[4:i], b[i-1] == '/'
	if selfClose {
		attrs = attrs[:len(attrs)-1]
	}
	return attrs, selfClose, true
}

// plainCells reads the cells at the scanner's position that are whole in its buffer
// and of the commonest forms, in one pass each: <c> with unprefixed attributes
// separated by spaces, then /> or <v>text</v></c> or <is><t>text</t></is></c>. It
// stops before the first other one (or the row's end), for the general reading; col
// is the column of the last cell read.
func (x *sheetRows) plainCells(col *int) error {
	sc := x.sc
	b := sc.buf[:sc.end]
	p, c := sc.pos, *col
	for len(b)-p > 3 && b[p] == '<' && b[p+1] == 'c' && b[p+2] == ' ' {
		var q, ref, style int
		var typ cellType
		var selfClose bool
		if end, m := x.sameTag(b, p, c+1); m != nil {
			q, ref, typ, style, selfClose = end, c+1, m.typ, m.style, m.selfClose
		} else {
			var ok bool
			if q, ref, typ, style, selfClose, ok = cellTag(b, p+3); !ok {
				break
			}
			x.remember(b[p:q], ref, typ, style, selfClose)
		}
		var text []byte
		value, special, inline := false, false, false
		if !selfClose {
			rest := b[q:]
			if len(rest) < 8 {
				break
			}
			switch w := binary.LittleEndian.Uint64(rest); {
			case w&0xffffff == plainV:
				e, sp := textEnd(rest[3:])
				if e < 0 || len(rest) < 3+e+8 || binary.LittleEndian.Uint64(rest[3+e:]) != plainVEnd {
					break
				}
				text, value, special = rest[3:3+e], true, sp
				q += 3 + e + 8
			case w&0xffffffffffffff == plainIsT:
				e, sp := textEnd(rest[7:])
				if e < 0 || len(rest) < 7+e+13 || string(rest[7+e:7+e+13]) != "</t></is></c>" {
					break
				}
				text, value, special, inline = rest[7:7+e], true, sp, true
				q += 7 + e + 13
			}
			if !value {
				break // a value of another form
			}
		}
		next := c + 1
		if ref > 0 {
			next = ref
		} else if next > maxExcelCol {
			return x.malformed("row %d holds more than Excel's %d columns.", x.row, maxExcelCol)
		}
		c, p = next, q
		if selfClose {
			continue
		}
		if err := x.keepPlain(c, typ, style, text, inline, special); err != nil {
			return err
		}
	}
	sc.pos, *col = p, c
	return nil
}

// sameTag reads the tag of the cell at b[p:] when it is <c r=" and the reference of
// column col in the row, then what followed the reference in the column's last tag:
// where it ends, and what it says; nil otherwise.
func (x *sheetRows) sameTag(b []byte, p, col int) (int, *tagMemo) {
	if col >= len(x.tags) || x.rowRefN == 0 || len(b)-p < 48 {
		return 0, nil
	}
	m := &x.tags[col]
	w := b[p : p+48]
	if m.n == 0 || binary.LittleEndian.Uint64(w)&m.openMask != m.open {
		return 0, nil
	}
	q := m.openN
	if binary.LittleEndian.Uint64(w[q:])&x.rowMask != x.rowRef {
		return 0, nil
	}
	q += x.rowRefN
	if binary.LittleEndian.Uint64(w[q:])&m.m1 != m.w1 || binary.LittleEndian.Uint64(w[q+8:])&m.m2 != m.w2 {
		return 0, nil
	}
	return p + q + m.n, m
}

// remember keeps tag, the start tag of a cell of column col read whole, for sameTag:
// when it starts with its reference, followed by at most 16 bytes that hold no other.
func (x *sheetRows) remember(tag []byte, col int, typ cellType, style int, selfClose bool) {
	if col <= 0 || col >= maxTagMemos || len(tag) < 8 || binary.LittleEndian.Uint64(tag)&byteMask(6) != cellRefOpen {
		return
	}
	k := bytes.IndexByte(tag[6:], '"')
	if k < 0 {
		return
	}
	rest := tag[7+k:]
	if len(rest) > 16 {
		return
	}
	for i := 1; i+1 < len(rest); i++ {
		if rest[i] == 'r' && rest[i+1] == '=' && isSpace(rest[i-1]) {
			return // another reference
		}
	}
	for len(x.tags) <= col {
		x.tags = append(x.tags, tagMemo{})
	}
	letters, n := columnLetters(col)
	n1 := min(len(rest), 8)
	x.tags[col] = tagMemo{open: cellRefOpen | letters<<48, openMask: byteMask(6 + n), openN: 6 + n,
		w1: wordOf(rest[:n1]), m1: byteMask(n1), w2: wordOf(rest[n1:]), m2: byteMask(len(rest) - n1),
		n: len(rest), typ: typ, style: style, selfClose: selfClose}
}

// cellRefOpen is <c r=", as a little-endian word of six bytes.
var cellRefOpen = wordOf([]byte(`<c r="`))

// wordOf is b (at most 8 bytes) as a little-endian word.
func wordOf(b []byte) uint64 {
	var w uint64
	for i, c := range b[:min(len(b), 8)] {
		w |= uint64(c) << (8 * i)
	}
	return w
}

// byteMask is the mask of the first n (at most 8) bytes of a little-endian word.
func byteMask(n int) uint64 {
	if n >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*n) - 1
}

// columnLetters is column col's name (A, AB, XFD) as a little-endian word of n bytes.
func columnLetters(col int) (w uint64, n int) {
	switch {
	case col <= 26:
		return uint64('A' + col - 1), 1
	case col <= 26+26*26:
		col -= 27
		return uint64('A'+col/26) | uint64('A'+col%26)<<8, 2
	}
	col -= 27 + 26*26
	return uint64('A'+col/676) | uint64('A'+col/26%26)<<8 | uint64('A'+col%26)<<16, 3
}

// <v> and <is><t>, as little-endian words.
var (
	plainV   = binary.LittleEndian.Uint64([]byte("<v>\x00\x00\x00\x00\x00"))
	plainIsT = binary.LittleEndian.Uint64([]byte("<is><t>\x00"))
)

// cellTag reads the attributes of a cell's start tag from b[q:] (after "<c ") when the
// tag is whole in b and plain: each attribute a name, = and a value in double quotes,
// and r a reference. It gives where the tag ends, the column r gives (0 for none), the
// type and style, and whether the tag closes the cell; ok is false for another tag.
func cellTag(b []byte, q int) (end, col int, typ cellType, style int, selfClose, ok bool) {
	style = -1
	for q+16 <= len(b) {
		w := binary.LittleEndian.Uint64(b[q:])
		switch byte(w) {
		case ' ', '\t', '\n', '\r':
			q++
			continue
		case '>':
			return q + 1, col, typ, style, false, true
		case '/':
			return q + 2, col, typ, style, true, byte(w>>8) == '>'
		}
		name := byte(w)
		var v []byte
		if uint16(w>>8) == '='|'"'<<8 { // the commonest: r="A1"
			v = b[q+3:]
			k := 0
			if m := swarEq(binary.LittleEndian.Uint64(v), '"'); m != 0 {
				k = bits.TrailingZeros64(m) >> 3
			} else if k = scanTo(v, '"'); k < 0 {
				return 0, 0, 0, 0, false, false
			}
			v, q = v[:k], q+4+k
		} else {
			j := q + 1
			for j < len(b) && b[j] != '=' && b[j] != '>' && !isSpace(b[j]) {
				j++
			}
			if j+1 >= len(b) || b[j] != '=' || b[j+1] != '"' && b[j+1] != '\'' {
				return 0, 0, 0, 0, false, false
			}
			k := scanTo(b[j+2:], b[j+1])
			if k < 0 {
				return 0, 0, 0, 0, false, false
			}
			if j > q+1 {
				name = 0 // r, t and s are the attributes read
			}
			v, q = b[j+2:j+2+k], j+3+k
		}
		if q < len(b) && !isSpace(b[q]) && b[q] != '>' && b[q] != '/' {
			// Not XML (attributes are apart): the general reading reads it as it can,
			// wherever the buffer ends (FuzzSheetAcrossReads).
			return 0, 0, 0, 0, false, false
		}
		switch name {
		case 'r':
			c, ok := cellColumn(v)
			if !ok {
				return 0, 0, 0, 0, false, false
			}
			col = c
		case 't':
			typ = typeOf(v)
		case 's':
			style = styleOf(v)
		}
	}
	return 0, 0, 0, 0, false, false
}

// keepPlain keeps the value of a cell plainCells read, text being its <v> or inline
// string as the XML holds it in the scanner's buffer (special: with an entity or a
// carriage return). A value shown as it is held is kept in place.
func (x *sheetRows) keepPlain(col int, typ cellType, style int, text []byte, inline, special bool) error {
	if !special {
		switch typ {
		case cellNumber:
			k := x.styleKind(style)
			if k == kNull {
				if kn := plainNumber(text); kn.k != kNull {
					return x.put(col, text, kn, true)
				}
				break
			}
			if f, ok := parseFloat(trim(text)); ok {
				start := len(x.buf)
				if buf, kn, ok := appendSerialKnown(x.buf, f, k, x.wb.date1904); ok {
					x.buf = buf
					return x.putBuf(col, start, kn, false)
				}
			}
		case cellInline:
			if !inline || bytes.IndexByte(text, '_') < 0 {
				return x.putInScan(col, text)
			}
		case cellString, cellError:
			return x.putInScan(col, text)
		case cellShared:
			i, ok := atoiBytes(trim(text))
			if !ok {
				return nil // no string: an empty value
			}
			if s, ok := x.wb.sst.inMemory(i); ok {
				if len(s) == 0 {
					return nil
				}
				return x.put(col, s, known{}, false)
			}
		}
	}
	if special {
		text = appendText(x.vBuf[:0], text)
		x.vBuf = text
	}
	if inline {
		x.v, x.is = nil, text
	} else {
		x.v, x.is = text, nil
	}
	return x.keep(col, typ, style, false, inline)
}

// putInScan keeps v, in the scanner's buffer, unless it is empty.
func (x *sheetRows) putInScan(col int, v []byte) error {
	if len(v) == 0 {
		return nil
	}
	return x.put(col, v, known{}, true)
}

// plainVEnd is </v></c>, as a little-endian word.
var plainVEnd = binary.LittleEndian.Uint64([]byte("</v></c>"))

// cellType is a cell's t attribute.
type cellType uint8

const (
	cellNumber cellType = iota // n, or none
	cellShared                 // s
	cellInline                 // inlineStr
	cellString                 // str, a formula's text
	cellBool                   // b
	cellError                  // e
	cellDate                   // d, an ISO 8601 date
)

func typeOf(t []byte) cellType {
	switch string(t) {
	case "s":
		return cellShared
	case "inlineStr":
		return cellInline
	case "str":
		return cellString
	case "b":
		return cellBool
	case "e":
		return cellError
	case "d":
		return cellDate
	}
	return cellNumber
}

// styleOf is a cell's s attribute, -1 for none.
func styleOf(s []byte) int {
	if n, ok := atoiBytes(s); ok {
		return n
	}
	return -1
}

// readCell reads a cell's content up to its </c> and keeps its value.
func (x *sheetRows) readCell(col int, typ cellType, styleID int) error {
	x.v, x.is = x.vBuf[:0], x.isBuf[:0]
	defer func() { x.vBuf, x.isBuf = x.v[:0], x.is[:0] }()
	formula, inline, inRPh, valued := false, false, false, false
	var capture *[]byte
	for {
		t, err := x.sc.next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return x.readErr(err)
		}
		switch t.kind {
		case tokStart:
			switch string(t.name) {
			case "v":
				valued = true
				if !t.selfClose {
					capture = &x.v
				}
			case "f":
				formula = true
			case "is":
				inline = true
			case "t":
				if inline && !inRPh && !t.selfClose {
					capture = &x.is
				}
			case "rPh":
				inRPh = !t.selfClose
			}
			continue
		case tokEnd:
			switch string(t.name) {
			case "v", "t":
				capture = nil
			case "rPh":
				inRPh = false
			case "c":
				if formula && !valued && !inline {
					if x.uncomputed++; x.uncomputed == 1 {
						x.firstUncomputed = columnName(col) + strconv.Itoa(x.row)
					}
				}
				return x.keep(col, typ, styleID, formula, inline)
			}
			continue
		}
		if capture == nil {
			continue
		}
		if t.kind == tokCDATA {
			*capture = append(*capture, t.text...)
		} else {
			*capture = appendText(*capture, t.text)
		}
		if len(*capture) > x.maxBytes {
			return x.malformed("row %d holds a cell longer than %d bytes.", x.row, x.maxBytes)
		}
	}
}

// Cells' runs are short: they are scanned eight bytes at a time within a word (the
// classic test for a zero byte), faster than a loop or than bytes.IndexByte's call.
const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// swarEq has the high bit set in each byte of x equal to c: exactly in the lowest such
// byte, possibly (a borrow) in bytes above it.
func swarEq(x uint64, c byte) uint64 {
	y := x ^ swarOnes*uint64(c)
	return (y - swarOnes) &^ y & swarHigh
}

// scanTo is bytes.IndexByte for the short runs inside a cell.
func scanTo(b []byte, c byte) int {
	i := 0
	for ; i+8 <= len(b) && i < 64; i += 8 {
		if m := swarEq(binary.LittleEndian.Uint64(b[i:]), c); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	if i+8 <= len(b) {
		if j := bytes.IndexByte(b[i:], c); j >= 0 {
			return i + j
		}
		return -1
	}
	for ; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// textEnd is where a cell's text ends (its next <, or -1) and whether it holds an
// entity or a carriage return before that (appendText's work).
func textEnd(b []byte) (int, bool) {
	special := false
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		sp := swarEq(x, '&') | swarEq(x, '\r')
		if lt := swarEq(x, '<'); lt != 0 {
			n := bits.TrailingZeros64(lt)
			return i + n>>3, special || sp&(1<<n-1) != 0
		}
		special = special || sp != 0
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case '<':
			return i, special
		case '&', '\r':
			special = true
		}
	}
	return -1, special
}

// keep appends the value of the cell just read (x.v, x.is) to the row.
func (x *sheetRows) keep(col int, typ cellType, style int, formula, inline bool) error {
	start := len(x.buf)
	var err error
	if x.buf, err = x.appendValue(x.buf, typ, style, inline); err != nil {
		return err
	}
	return x.putBuf(col, start, known{}, formula)
}

// putBuf keeps buf[start:], the value of the cell just read, in the row: an empty one
// only for a formula's cell (whose cached value is empty text).
func (x *sheetRows) putBuf(col, start int, kn known, formula bool) error {
	end := len(x.buf)
	if end == start && !formula {
		return nil
	}
	if col > x.maxCols {
		x.buf = x.buf[:start]
	}
	return x.put(col, x.buf[start:end:end], kn, false)
}

// put keeps v as the value of the cell in column col (from 1), of which kn says what
// it holds; inScan: v is in the scanner's buffer.
func (x *sheetRows) put(col int, v []byte, kn known, inScan bool) error {
	x.width = max(x.width, col)
	if col > x.maxCols {
		return nil
	}
	if x.size += len(v); x.size > x.maxBytes {
		return x.malformed("row %d is longer than %d bytes.", x.row, x.maxBytes)
	}
	i := col - 1
	for len(x.cells) < i {
		x.cells, x.cellsKn = append(x.cells, nil), append(x.cellsKn, known{})
	}
	if i == len(x.cells) { // the commonest: the next column
		x.cells, x.cellsKn = append(x.cells, v), append(x.cellsKn, kn)
	} else {
		x.cells[i], x.cellsKn[i] = v, kn
	}
	if inScan {
		x.inScan = append(x.inScan, int32(i))
	}
	return nil
}

// own copies the cells read in place in the scanner's buffer into buf: reading on
// moves that buffer, and gives it back to be filled again.
func (x *sheetRows) own() {
	for _, i := range x.inScan {
		start := len(x.buf)
		x.buf = append(x.buf, x.cells[i]...)
		x.cells[i] = x.buf[start:len(x.buf):len(x.buf)]
	}
	x.inScan = x.inScan[:0]
}

// styleKind is what cell style id shows of a number: kDate, kDatetime, kText (a time of
// day), or kNull (none of these, or no such style).
func (x *sheetRows) styleKind(id int) kind {
	if id >= 0 && id < len(x.wb.styles) {
		return x.wb.styles[id]
	}
	return kNull
}

func (x *sheetRows) appendValue(dst []byte, typ cellType, style int, inline bool) ([]byte, error) {
	switch typ {
	case cellShared:
		i, ok := atoiBytes(trim(x.v))
		if !ok {
			return dst, nil
		}
		s, _, err := x.wb.sst.get(i)
		if err != nil {
			return dst, x.malformed("its shared strings could not be read back: %v", err)
		}
		return append(dst, s...), nil
	case cellInline:
		if inline {
			return appendOOXMLText(dst, x.is), nil
		}
		return append(dst, x.v...), nil
	case cellString, cellError:
		return append(dst, x.v...), nil
	case cellBool:
		switch string(x.v) {
		case "1":
			return append(dst, "TRUE"...), nil
		case "0":
			return append(dst, "FALSE"...), nil
		}
		return append(dst, x.v...), nil
	case cellDate:
		return x.appendISODate(dst, style), nil
	}
	if k := x.styleKind(style); k != kNull {
		if f, ok := parseFloat(trim(x.v)); ok {
			if d, ok := appendSerial(dst, f, k, x.wb.date1904); ok {
				return d, nil
			}
		}
	}
	return appendNumber(dst, x.v), nil
}

// appendISODate appends a date cell (t="d", an ISO 8601 date) as a date when its style
// shows one, else as a date and time.
func (x *sheetRows) appendISODate(dst []byte, style int) []byte {
	s := string(trim(x.v))
	for _, l := range []string{"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999", "2006-01-02"} {
		t, err := time.Parse(l, s)
		if err != nil {
			continue
		}
		if style >= 0 && style < len(x.wb.styles) && x.wb.styles[style] == kDate {
			return t.AppendFormat(dst, time.DateOnly)
		}
		return t.AppendFormat(dst, time.DateTime)
	}
	return append(dst, x.v...)
}

// Excel's serial dates are days since its epoch (1899-12-30, or 1904-01-01 in the 1904
// system), the time of day their fraction. In the 1900 system day 60 is 1900-02-29, a
// day that never was (kept from Lotus 1-2-3), so days before it count from a day later.
// maxSerial is the day after 9999-12-31, Excel's last date, in the 1900 system.
const maxSerial = 2958466

// appendSerial appends serial date f as k shows it (kDate, kDatetime, or kText for a
// time of day), to the second; false when f is no date Excel has.
func appendSerial(dst []byte, f float64, k kind, date1904 bool) ([]byte, bool) {
	dst, _, ok := appendSerialKnown(dst, f, k, date1904)
	return dst, ok
}

// appendSerialKnown is appendSerial, with what classify says of what it appends.
func appendSerialKnown(dst []byte, f float64, k kind, date1904 bool) ([]byte, known, bool) {
	if f < 0 || f >= maxSerial || math.IsNaN(f) {
		return dst, known{}, false
	}
	secs := int64(math.Round(f * 86400))
	days, secs := secs/86400, secs%86400
	switch {
	case date1904:
		days += epoch1904Days
	case days >= 1 && days < 60:
		days += epoch1900Days + 1
	default:
		days += epoch1900Days
	}
	if days > lastCivilDay {
		return dst, known{}, false
	}
	switch k {
	case kDate:
		return appendCivil(dst, days), known{k: kDate, v: float64(days * 86400)}, true
	case kDatetime:
		return appendClock(append(appendCivil(dst, days), ' '), secs), known{k: kDatetime, v: float64(days*86400 + secs)}, true
	}
	return appendClock(dst, secs), known{k: kText}, true
}

// The epochs, and 9999-12-31, in days from 1970-01-01.
const (
	epoch1900Days = -25569
	epoch1904Days = -24107
	lastCivilDay  = 2932896
)

// appendCivil appends the date days after 1970-01-01 as YYYY-MM-DD (for years 0 to
// 9999), computed as in Howard Hinnant's civil_from_days: time.Time.AppendFormat was a
// tenth of reading a sheet of dates.
func appendCivil(dst []byte, days int64) []byte {
	z := uint64(days + 719468) // from 0000-03-01: not negative, for the years written
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	hi, lo := 2*(y/100), 2*(y%100)
	return append(dst, twoDigits[hi], twoDigits[hi+1], twoDigits[lo], twoDigits[lo+1], '-',
		twoDigits[2*m], twoDigits[2*m+1], '-', twoDigits[2*d], twoDigits[2*d+1])
}

// twoDigits are 00 to 99, end to end.
const twoDigits = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"4041424344454647484950515253545556575859606162636465666768697071727374757677787980" +
	"81828384858687888990919293949596979899"

// appendClock appends secs after midnight as hh:mm:ss.
func appendClock(dst []byte, secs int64) []byte {
	h, m, s := secs/3600, secs/60%60, secs%60
	return append(dst, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
}

// appendNumber appends a number cell's stored value as Excel shows it in the General
// format: plainly, to 15 significant digits (0.30000000000000004 is 0.3), without an
// exponent unless that needs one. Text that is no number is appended as it is.
func appendNumber(dst, v []byte) []byte {
	if plainNumber(v).k != kNull {
		return append(dst, v...)
	}
	s := string(v)
	if bytes.IndexByte(v, '_') >= 0 {
		return append(dst, v...)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return append(dst, v...)
	}
	plain := strconv.AppendFloat(dst, f, 'f', -1, 64)
	digits := len(plain) - len(dst) - bytes.Count(plain[len(dst):], []byte("."))
	if digits > 15 && !within15(s) {
		return strconv.AppendFloat(dst, f, 'G', 15, 64)
	}
	return plain
}

// plainNumber tells whether v is a number already in the form appendNumber gives (an
// optional minus, digits without a leading zero, an optional fraction not ending in 0,
// at most 15 characters besides the point), and what classify says of it: kInt or
// kFloat with its value; the zero known when it is not one.
func plainNumber(v []byte) known {
	i := 0
	if len(v) > 0 && v[0] == '-' {
		i++
	}
	start, digits, point := i, 0, -1
	var mant uint64
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
		case c == '.' && point < 0:
			point = i
		default:
			return known{}
		}
	}
	switch {
	case digits == 0 || len(v)-min(point+1, 1) > 15 || point == start || point == len(v)-1:
		return known{}
	case v[start] == '0' && len(v) > start+1 && v[start+1] != '.':
		return known{} // a leading zero
	case point > 0 && v[len(v)-1] == '0':
		return known{} // a trailing zero in the fraction
	case point < 0 && v[start] == '0' && start > 0:
		return known{} // -0
	}
	// As parseInt and parseFloat compute them: at most 15 digits are exact.
	if point < 0 {
		n := int64(mant)
		if start > 0 {
			n = -n
		}
		return known{k: kInt, v: float64(n)}
	}
	f := float64(mant) / pow10[len(v)-point-1]
	if start > 0 {
		f = -f
	}
	return known{k: kFloat, v: f}
}

// within15 tells whether s is an integer whose digits past the 15th are zeros, which
// Excel keeps exactly.
func within15(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	i, j := 0, len(s)
	for i < j && (s[i] == '+' || s[i] == '-' || s[i] == '0') {
		i++
	}
	for j > i && s[j-1] == '0' {
		j--
	}
	return j-i <= 15
}

// cellColumn is the column of a cell reference (A1 is 1, AB7 is 28).
func cellColumn(ref []byte) (int, bool) {
	col, i := 0, 0
	for ; i < len(ref); i++ {
		c := ref[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c < 'A' || c > 'Z' {
			break
		}
		col = col*26 + int(c-'A'+1)
		if col > maxExcelCol {
			return 0, false
		}
	}
	if i == 0 || i == len(ref) || !allDigits(ref[i:]) {
		return 0, false
	}
	return col, true
}

// allDigits tells whether b is ASCII digits only. Up to eight are tested at once,
// read past b's end into its capacity (the scanner's buffer) when it has one; a byte
// is no digit when adding 0x46 or taking 0x30 sets its top bit (carries and borrows
// only spread from a byte that is no digit).
func allDigits(b []byte) bool {
	if len(b) <= 8 && cap(b) >= 8 {
		past := ^uint64(0) << (8 * len(b)) // the bytes past b, made zeros
		w := binary.LittleEndian.Uint64(b[:8])&^past | 0x3030303030303030&past
		// Parenthesized: Go's | binds as tightly as + and -.
		return ((w+0x4646464646464646)|(w-0x3030303030303030))&0x8080808080808080 == 0
	}
	for _, c := range b {
		if c-'0' > 9 {
			return false
		}
	}
	return true
}

// atoiBytes reads a non-negative decimal of at most 9 digits.
func atoiBytes(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
