package pkgs

import "strings"

// ImportedModules returns the top-level modules the import statements of code name,
// as Python's tokenizer sees them: a name in a string, a comment or an expression is
// not an import. It is what Pyodide's loadPackagesFromImports loads (that walks the
// parsed tree for Import and ImportFrom nodes), so the engine fetches no package the
// session would not load. Relative imports name no package.
//
// A statement starts at a logical line (a newline outside brackets), after ";" and after
// the ":" of a compound statement on one line (`try: import x`). F-strings whose fields
// hold the string's own quote (valid since Python 3.12) are read as ending early: the
// rest is then scanned as code, which can only add names an import would name.
func ImportedModules(code string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(m string) {
		if top, _, _ := strings.Cut(m, "."); top != "" && !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	s := &pyScanner{src: code, start: true}
	for {
		tok, start := s.next()
		if tok == "" {
			return out
		}
		if !start {
			continue
		}
		switch tok {
		case "import":
			for {
				name := s.dotted()
				if name == "" {
					break
				}
				add(name)
				if t := s.peek(); t == "as" {
					s.next()
					s.next()
				}
				if s.peek() != "," {
					break
				}
				s.next()
			}
		case "from":
			if s.peek() == "." {
				continue // relative: the session's own modules
			}
			add(s.dotted())
		}
	}
}

// pyScanner yields Python tokens closely enough to find statements: names, strings
// (skipped whole), comments (skipped) and single punctuation characters.
type pyScanner struct {
	src   string
	i     int
	depth int  // open brackets: newlines inside them do not end a statement
	start bool // the next token begins a statement
}

// next returns the next token that is not a string, and whether it begins a statement.
func (s *pyScanner) next() (string, bool) {
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			s.i++
			if s.depth == 0 {
				s.start = true
			}
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f':
			s.i++
			continue
		case c == '\\' && s.i+1 < len(s.src) && (s.src[s.i+1] == '\n' || s.src[s.i+1] == '\r'):
			s.i += 2 // a continued line
			continue
		case c == '#':
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
			continue
		case c == '\'' || c == '"':
			s.skipString()
			s.start = false
			continue
		case isNameByte(c):
			j := s.i
			for j < len(s.src) && isNameByte(s.src[j]) {
				j++
			}
			if j < len(s.src) && (s.src[j] == '\'' || s.src[j] == '"') && stringPrefix(s.src[s.i:j]) {
				s.i = j
				s.skipString()
				s.start = false
				continue
			}
			tok, start := s.src[s.i:j], s.start
			s.i, s.start = j, false
			return tok, start
		}
		s.i++
		start := s.start
		s.start = false
		switch c {
		case '(', '[', '{':
			s.depth++
		case ')', ']', '}':
			s.depth = max(s.depth-1, 0)
		case ';':
			s.start = s.depth == 0
		case ':':
			s.start = s.depth == 0 && !(s.i < len(s.src) && s.src[s.i] == '=')
		}
		return string(c), start
	}
	return "", false
}

// peek returns the next token without taking it.
func (s *pyScanner) peek() string {
	save := *s
	tok, _ := s.next()
	*s = save
	return tok
}

// dotted reads a dotted name (a.b.c), or returns "".
func (s *pyScanner) dotted() string {
	var b strings.Builder
	for {
		save := *s
		tok, _ := s.next()
		if tok == "" || !isNameByte(tok[0]) || tok[0] >= '0' && tok[0] <= '9' {
			*s = save
			return b.String()
		}
		b.WriteString(tok)
		if s.peek() != "." {
			return b.String()
		}
		s.next()
		b.WriteByte('.')
	}
}

// skipString moves past the string literal whose opening quote is at s.i.
func (s *pyScanner) skipString() {
	q := s.src[s.i]
	triple := strings.HasPrefix(s.src[s.i:], strings.Repeat(string(q), 3))
	if triple {
		s.i += 3
	} else {
		s.i++
	}
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\':
			s.i += 2
			continue
		case c == '\n' && !triple:
			return // unterminated: the tokenizer would stop here
		case c == q && (!triple || strings.HasPrefix(s.src[s.i:], strings.Repeat(string(q), 3))):
			if triple {
				s.i += 3
			} else {
				s.i++
			}
			return
		}
		s.i++
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// stringPrefix tells whether p may prefix a string literal (r, b, f, t, u and pairs).
func stringPrefix(p string) bool {
	if len(p) > 2 {
		return false
	}
	for _, c := range strings.ToLower(p) {
		if !strings.ContainsRune("rbuft", c) {
			return false
		}
	}
	return true
}
