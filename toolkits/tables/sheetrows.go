package tables

import (
	"bytes"
	"encoding/binary"
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

	buf   []byte     // the kept cells' values, end to end
	spans []cellSpan // where they are in buf
	width int        // the row's last column with a value
	cells [][]byte

	v, is       []byte // the cell being read: its <v>, its inline string
	vBuf, isBuf []byte // where they are kept when not read in place
}

type cellSpan struct {
	col        int // from 1
	start, end int
}

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
	ra := newReadAhead(rc, readAheadBytes, xmlScanBytes, readAheadBuffers)
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
	var t *xmlToken
	for {
		var err error
		if t, err = x.sc.next(); err != nil {
			return x.readErr(err)
		}
		if t.kind == tokStart && string(t.name) == "row" {
			break
		}
		if t.kind == tokEnd && string(t.name) == "sheetData" {
			x.done = true
			return nil
		}
	}
	n := x.row + 1
	if r := attr(t.attrs, "r"); r != nil {
		var ok bool
		if n, ok = atoiBytes(r); !ok || n < 1 || n > maxExcelRow {
			return x.malformed("a row number %q is not one of Excel's (1 to %d).", clip(r, 32), maxExcelRow)
		}
	}
	if n > x.row {
		x.gap = n - x.row - 1
	}
	x.row, x.held = n, true
	x.buf, x.spans, x.width, x.cells = x.buf[:0], x.spans[:0], 0, x.cells[:0]
	if t.selfClose {
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
	cells := x.cells[:0]
	for range min(x.width, x.maxCols) {
		cells = append(cells, nil)
	}
	for _, s := range x.spans {
		if s.col <= len(cells) {
			cells[s.col-1] = x.buf[s.start:s.end]
		}
	}
	x.cells = cells
	return nil
}

var rowEnd = []byte("</row>")

// plainCells reads the cells at the scanner's position that are whole in its buffer
// and of the commonest forms, in one pass each: <c> with unprefixed attributes
// separated by spaces, then /> or <v>text</v></c> or <is><t>text</t></is></c>. It
// stops before the first other one (or the row's end), for the general reading; col
// is the column of the last cell read.
func (x *sheetRows) plainCells(col *int) error {
	sc := x.sc
	b := sc.buf[:sc.end]
	p := sc.pos
	defer func() { sc.pos = p }()
	for p+3 <= len(b) && b[p] == '<' && b[p+1] == 'c' && b[p+2] == ' ' {
		q := p + 3
		var ref, typ, style []byte
		selfClose, whole := false, false
		for {
			for q < len(b) && b[q] == ' ' {
				q++
			}
			if q+1 >= len(b) {
				break
			}
			if b[q] == '>' {
				q++
				whole = true
				break
			}
			if b[q] == '/' {
				selfClose, whole = b[q+1] == '>', b[q+1] == '>'
				q += 2
				break
			}
			j := q + 1 // r=, t= and s= are the attributes read, and the commonest
			for j < len(b) && b[j] != '=' && b[j] != '>' && !isSpace(b[j]) {
				j++
			}
			if j+1 >= len(b) || b[j] != '=' || b[j+1] != '"' && b[j+1] != '\'' {
				break
			}
			k := scanTo(b[j+2:], b[j+1])
			if k < 0 {
				break
			}
			if j == q+1 {
				switch v := b[j+2 : j+2+k]; b[q] {
				case 'r':
					ref = v
				case 't':
					typ = v
				case 's':
					style = v
				}
			}
			q = j + 3 + k
		}
		if !whole {
			return nil
		}
		var text []byte
		special, inline := false, false
		if !selfClose {
			switch rest := b[q:]; {
			case len(rest) > 3 && rest[0] == '<' && rest[1] == 'v' && rest[2] == '>':
				e, sp := textEnd(rest[3:])
				if e < 0 || len(rest) < 3+e+8 || binary.LittleEndian.Uint64(rest[3+e:]) != plainVEnd {
					return nil
				}
				text, special = rest[3:3+e], sp
				q += 3 + e + 8
			case len(rest) > 7 && string(rest[:7]) == "<is><t>":
				e, sp := textEnd(rest[7:])
				if e < 0 || len(rest) < 7+e+13 || string(rest[7+e:7+e+13]) != "</t></is></c>" {
					return nil
				}
				text, special, inline = rest[7:7+e], sp, true
				q += 7 + e + 13
			default:
				return nil
			}
		}
		c := *col + 1
		if ref != nil {
			var ok bool
			if c, ok = cellColumn(ref); !ok {
				return x.malformed("a cell reference %q is not one of Excel's.", clip(ref, 32))
			}
		} else if c > maxExcelCol {
			return x.malformed("row %d holds more than Excel's %d columns.", x.row, maxExcelCol)
		}
		*col, p = c, q
		if selfClose {
			continue
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
		if err := x.keep(c, typeOf(typ), styleOf(style), false, inline); err != nil {
			return err
		}
	}
	return nil
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
	formula, inline, inRPh := false, false, false
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

// keep appends the value of the cell just read to the row.
func (x *sheetRows) keep(col int, typ cellType, style int, formula, inline bool) error {
	start := len(x.buf)
	var err error
	if x.buf, err = x.appendValue(x.buf, typ, style, inline); err != nil {
		return err
	}
	if len(x.buf) == start && !formula {
		return nil
	}
	x.width = max(x.width, col)
	if col > x.maxCols {
		x.buf = x.buf[:start]
		return nil
	}
	if len(x.buf) > x.maxBytes {
		return x.malformed("row %d is longer than %d bytes.", x.row, x.maxBytes)
	}
	x.spans = append(x.spans, cellSpan{col: col, start: start, end: len(x.buf)})
	return nil
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
	k := kNull
	if style >= 0 && style < len(x.wb.styles) {
		k = x.wb.styles[style]
	}
	if k != kNull {
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
	if f < 0 || f >= maxSerial || math.IsNaN(f) {
		return dst, false
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
		return dst, false
	}
	switch k {
	case kDate:
		return appendCivil(dst, days), true
	case kDatetime:
		return appendClock(append(appendCivil(dst, days), ' '), secs), true
	}
	return appendClock(dst, secs), true
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
	z := days + 719468
	era := z / 146097
	if z < 0 {
		era = (z - 146096) / 146097
	}
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
	return append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10))
}

// appendClock appends secs after midnight as hh:mm:ss.
func appendClock(dst []byte, secs int64) []byte {
	h, m, s := secs/3600, secs/60%60, secs%60
	return append(dst, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
}

// appendNumber appends a number cell's stored value as Excel shows it in the General
// format: plainly, to 15 significant digits (0.30000000000000004 is 0.3), without an
// exponent unless that needs one. Text that is no number is appended as it is.
func appendNumber(dst, v []byte) []byte {
	if plainNumber(v) {
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

// plainNumber tells whether v is a number already in the form appendNumber gives: an
// optional minus, digits without a leading zero, an optional fraction not ending in 0,
// at most 15 characters besides the point.
func plainNumber(v []byte) bool {
	i := 0
	if len(v) > 0 && v[0] == '-' {
		i++
	}
	start, digits, point := i, 0, -1
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && point < 0:
			point = i
		default:
			return false
		}
	}
	switch {
	case digits == 0 || len(v)-min(point+1, 1) > 15 || point == start || point == len(v)-1:
		return false
	case v[start] == '0' && len(v) > start+1 && v[start+1] != '.':
		return false // a leading zero
	case point > 0 && v[len(v)-1] == '0':
		return false // a trailing zero in the fraction
	case point < 0 && v[start] == '0' && start > 0:
		return false // -0
	}
	return true
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
	if i == 0 || i == len(ref) {
		return 0, false
	}
	for _, c := range ref[i:] {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	return col, true
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
