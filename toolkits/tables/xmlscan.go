package tables

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"
)

// xmlScanner reads the markup of a workbook's parts in place, from a buffer it refills:
// tags (name and raw attributes) and the text between them, nothing more. The parts it
// reads (worksheets, shared strings, styles, the workbook and its relationships) use no
// DTD and no entities but XML's five and character references, so it needs none of
// encoding/xml's generality, whose allocation per token and attribute is what made
// reading a sheet slow. A tag, comment or CDATA section longer than its buffer is an
// error; text is handed out in pieces of any length.
type xmlScanner struct {
	r        io.Reader
	ra       *readAhead // instead of r: its buffers are read in place
	buf      []byte
	pos, end int
	rerr     error // r's error, once its bytes are consumed
	tok      xmlToken
}

type tokenKind uint8

const (
	tokStart tokenKind = iota + 1 // <name attrs> or, with selfClose, <name attrs/>
	tokEnd                        // </name>
	tokText                       // text between tags, still escaped
	tokCDATA                      // a CDATA section's text, as is
)

// xmlToken is valid until the scanner's next call.
type xmlToken struct {
	kind      tokenKind
	selfClose bool
	name      []byte // the local name, without its namespace prefix
	attrs     []byte // the raw attributes of a start tag
	text      []byte
}

// xmlScanBytes is a scanner's buffer: the longest tag (or comment, or CDATA section) it
// reads.
const xmlScanBytes = 256 << 10

func newXMLScanner(r io.Reader) *xmlScanner {
	return &xmlScanner{r: r, buf: make([]byte, xmlScanBytes)}
}

// newAheadScanner scans what ra reads, in ra's buffers.
func newAheadScanner(ra *readAhead) *xmlScanner { return &xmlScanner{ra: ra} }

// errXMLTooLong is a markup longer than the scanner's buffer.
var errXMLTooLong = errorf(Malformed, "The workbook holds an XML element longer than %d bytes; it was not read.", xmlScanBytes)

// fill reads more input after what is left in the buffer, moving that to the front
// first; false when there is no more (s.rerr says why).
func (s *xmlScanner) fill() bool {
	if s.rerr != nil {
		return false
	}
	if s.ra != nil {
		b, err := s.ra.next(s.buf[s.pos:s.end])
		if err != nil {
			s.rerr = err
			return false
		}
		s.buf, s.pos, s.end = b, 0, len(b)
		return true
	}
	if s.pos > 0 {
		s.end = copy(s.buf, s.buf[s.pos:s.end])
		s.pos = 0
	}
	if s.end == len(s.buf) {
		s.rerr = errXMLTooLong
		return false
	}
	for range 100 {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.rerr = err
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
	s.rerr = io.ErrNoProgress
	return false
}

// err is what ended the input: io.EOF at its end.
func (s *xmlScanner) err() error {
	if s.rerr == nil {
		return io.ErrUnexpectedEOF
	}
	return s.rerr
}

// next returns the next token; io.EOF at the end of the input.
func (s *xmlScanner) next() (*xmlToken, error) {
	t := &s.tok
	for {
		if s.pos == s.end && !s.fill() {
			return nil, s.err()
		}
		b := s.buf[s.pos:s.end]
		if b[0] != '<' {
			i := bytes.IndexByte(b, '<')
			if i < 0 {
				if i = textCut(b); i == 0 {
					if s.fill() {
						continue
					}
					// The input's end; fill may have moved what was left to the front.
					b = s.buf[s.pos:s.end]
					i = len(b)
				}
			}
			s.pos += i
			*t = xmlToken{kind: tokText, text: b[:i]}
			return t, nil
		}
		if len(b) < 2 && !s.fill() {
			return nil, s.err()
		}
		switch s.buf[s.pos+1] {
		case '!':
			if err := s.special(t); err != nil {
				return nil, err
			}
			if t.kind == tokCDATA {
				return t, nil
			}
			continue // a comment or a declaration
		case '?':
			if _, err := s.until([]byte("?>")); err != nil {
				return nil, err
			}
			continue
		}
		tag, err := s.tag()
		if err != nil {
			return nil, err
		}
		*t = xmlToken{kind: tokStart}
		if tag[0] == '/' {
			t.kind = tokEnd
			tag = tag[1:]
		} else if len(tag) > 0 && tag[len(tag)-1] == '/' {
			t.selfClose = true
			tag = tag[:len(tag)-1]
		}
		n := 0
		for n < len(tag) && !isSpace(tag[n]) {
			n++
		}
		t.name, t.attrs = localName(tag[:n]), tag[n:]
		return t, nil
	}
}

// tag consumes a tag and returns what is between its < and >; a > inside a quoted
// attribute value does not end it.
func (s *xmlScanner) tag() ([]byte, error) {
	// Most tags hold no quote, or an even number of double quotes and no single one:
	// their first > ends them.
	if b := s.buf[s.pos:s.end]; len(b) > 1 {
		if j := bytes.IndexByte(b[1:], '>') + 1; j > 1 {
			in := b[1:j]
			if bytes.IndexByte(in, '\'') < 0 && bytes.Count(in, []byte{'"'})%2 == 0 {
				s.pos += j + 1
				return in, nil
			}
		}
	}
	for {
		b := s.buf[s.pos:s.end] // the < is at s.pos
		if i := tagEnd(b, 1); i >= 0 {
			s.pos += i + 1
			if i == 1 {
				return nil, errorf(Malformed, "The workbook's XML is malformed (an empty tag).")
			}
			return b[1:i], nil
		}
		// Rescanning from the tag's start after a refill keeps the quote state right.
		if !s.fill() {
			return nil, s.errInMarkup()
		}
	}
}

// tagEnd is where the > that ends the tag b starts is, looking from b[from] on, outside
// the tag's quoted attribute values; -1 when b holds none.
func tagEnd(b []byte, from int) int {
	var quote byte
	for i := from; i < len(b); i++ {
		switch c := b[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return i
		}
	}
	return -1
}

// until consumes input up to and including end and returns what came before it (from
// s.pos).
func (s *xmlScanner) until(end []byte) ([]byte, error) {
	for {
		b := s.buf[s.pos:s.end]
		if i := bytes.Index(b, end); i >= 0 {
			s.pos += i + len(end)
			return b[:i], nil
		}
		if !s.fill() {
			return nil, s.errInMarkup()
		}
	}
}

func (s *xmlScanner) errInMarkup() error {
	if s.rerr == io.EOF {
		return errorf(Malformed, "The workbook's XML is malformed (it ends inside a tag).")
	}
	return s.rerr
}

// special consumes <!-- comments -->, <![CDATA[ sections ]]> (t holds their text) and
// <!DECLARATIONS>.
func (s *xmlScanner) special(t *xmlToken) error {
	for s.end-s.pos < 9 && s.fill() {
	}
	b := s.buf[s.pos:s.end]
	switch {
	case bytes.HasPrefix(b, []byte("<!--")):
		s.pos += 4
		_, err := s.until([]byte("-->"))
		t.kind = 0
		return err
	case bytes.HasPrefix(b, []byte("<![CDATA[")):
		s.pos += 9
		text, err := s.until([]byte("]]>"))
		*t = xmlToken{kind: tokCDATA, text: text}
		return err
	}
	_, err := s.tag()
	t.kind = 0
	return err
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// localName is name without its namespace prefix (x:row is row).
func localName(name []byte) []byte {
	if i := bytes.LastIndexByte(name, ':'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// nextAttr returns the first attribute of attrs (its local name and its raw value) and
// the rest; ok is false when there is none.
func nextAttr(attrs []byte) (name, value, rest []byte, ok bool) {
	i := 0
	for i < len(attrs) && isSpace(attrs[i]) {
		i++
	}
	start := i
	for i < len(attrs) && attrs[i] != '=' && !isSpace(attrs[i]) {
		i++
	}
	name = attrs[start:i]
	for i < len(attrs) && isSpace(attrs[i]) {
		i++
	}
	if len(name) == 0 || i >= len(attrs) || attrs[i] != '=' {
		return nil, nil, nil, false
	}
	i++
	for i < len(attrs) && isSpace(attrs[i]) {
		i++
	}
	if i >= len(attrs) || attrs[i] != '"' && attrs[i] != '\'' {
		return nil, nil, nil, false
	}
	q := attrs[i]
	j := bytes.IndexByte(attrs[i+1:], q)
	if j < 0 {
		return nil, nil, nil, false
	}
	return localName(name), attrs[i+1 : i+1+j], attrs[i+2+j:], true
}

// attr is the raw value of the attribute named name (a local name), or nil.
func attr(attrs []byte, name string) []byte {
	for {
		n, v, rest, ok := nextAttr(attrs)
		if !ok {
			return nil
		}
		if string(n) == name {
			return v
		}
		attrs = rest
	}
}

// textCut is how much of text b, which ends the buffer, is handed out: not a reference
// (&amp;) or a line end (\r\n) that what follows may finish, which are read whole.
func textCut(b []byte) int {
	n := len(b)
	tail := max(0, n-maxReference)
	if j := bytes.LastIndexByte(b[tail:], '&'); j >= 0 && bytes.IndexByte(b[tail+j:], ';') < 0 {
		n = tail + j
	}
	if n > 0 && b[n-1] == '\r' {
		n--
	}
	return n
}

// maxReference is the longest reference appendText reads, &#x10FFFF; and shorter.
const maxReference = 12

// textSpecial are the bytes after which text needs more than a copy: an entity, and the
// line ends XML normalizes (\r\n and \r are \n).
var textSpecial = [256]bool{'&': true, '\r': true}

// appendText appends the escaped text b, unescaped, to dst.
func appendText(dst, b []byte) []byte {
	i := 0
	for i < len(b) && !textSpecial[b[i]] {
		i++
	}
	dst = append(dst, b[:i]...)
	for ; i < len(b); i++ {
		c := b[i]
		switch c {
		case '\r':
			dst = append(dst, '\n')
			if i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			continue
		case '&':
			j := bytes.IndexByte(b[i:min(len(b), i+maxReference)], ';')
			if j > 1 {
				if r, ok := entity(b[i+1 : i+j]); ok {
					dst = utf8.AppendRune(dst, r)
					i += j
					continue
				}
			}
		}
		dst = append(dst, c)
	}
	return dst
}

// entity is what &name; stands for: XML's five, and character references.
func entity(name []byte) (rune, bool) {
	switch string(name) {
	case "amp":
		return '&', true
	case "lt":
		return '<', true
	case "gt":
		return '>', true
	case "quot":
		return '"', true
	case "apos":
		return '\'', true
	}
	if name[0] != '#' {
		return 0, false
	}
	base, digits := 10, name[1:]
	if len(digits) > 0 && (digits[0] == 'x' || digits[0] == 'X') {
		base, digits = 16, digits[1:]
	}
	n, err := strconv.ParseUint(string(digits), base, 32)
	if err != nil || !utf8.ValidRune(rune(n)) {
		return 0, false
	}
	return rune(n), true
}

// appendUnescaped appends an attribute's raw value, unescaped, to dst.
func appendUnescaped(dst, v []byte) []byte {
	if bytes.IndexByte(v, '&') < 0 && bytes.IndexByte(v, '\r') < 0 {
		return append(dst, v...)
	}
	return appendText(dst, v)
}

// appendOOXMLText appends the text of a string item, whose characters XML cannot carry
// are escaped as _xHHHH_ (and a literal _x005F_ is an underscore), unescaped, to dst.
func appendOOXMLText(dst, s []byte) []byte {
	if bytes.IndexByte(s, '_') < 0 {
		return append(dst, s...)
	}
	for {
		i := bytes.Index(s, []byte("_x"))
		if i < 0 || i+7 > len(s) {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		if n, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16); err == nil && s[i+6] == '_' {
			dst = utf8.AppendRune(dst, rune(n))
			s = s[i+7:]
			continue
		}
		dst = append(dst, s[i:i+2]...)
		s = s[i+2:]
	}
}
