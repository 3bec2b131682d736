package sandchat

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/runenames"
)

// Size says how big a file is the way people read it: "12.5 MiB", "256 MiB", "3 KiB".
func Size(n int64) string {
	unit, name := int64(1), "bytes"
	switch {
	case n >= 1<<40:
		unit, name = 1<<40, "TiB"
	case n >= 1<<30:
		unit, name = 1<<30, "GiB"
	case n >= 1<<20:
		unit, name = 1<<20, "MiB"
	case n >= 1<<10:
		unit, name = 1<<10, "KiB"
	}
	if unit == 1 {
		if n == 1 {
			return "1 byte"
		}
		return fmt.Sprintf("%d bytes", n)
	}
	if n%unit == 0 {
		return strconv.FormatInt(n/unit, 10) + " " + name
	}
	return strconv.FormatFloat(float64(n)/float64(unit), 'f', 1, 64) + " " + name
}

// Limits on the path of a file under /data.
const (
	MaxDataPathBytes = 255
	MaxDataPathDepth = 8
)

// DataPath is the path p a client sent for a file under /data, normalised to NFC, or
// why it cannot be one (see CheckDataPath). Clients send the same visible name as
// different code points (macOS file pickers decompose accents, most keyboards compose
// them); stored in NFC it is one name, the one Python code typing it means.
func DataPath(p string) (string, error) {
	p = norm.NFC.String(p)
	return p, CheckDataPath(p)
}

// CheckDataPath accepts a path under /data made of plain names: relative, no empty,
// "." or ".." segments nor any made only of dots and spaces, no backslashes, no hidden characters (see hidden), at most
// MaxDataPathBytes long and MaxDataPathDepth names deep. It does not ask for NFC:
// DataPath normalises what is stored, and the engine checks every mounted path with
// this rule, so an upload stored in another form before that still mounts.
func CheckDataPath(p string) error {
	bad := func(why string) error {
		return Errorf(EINVALID, "The file path %q %s; use a relative path of plain names such as reports/2025/q1.csv.", p, why)
	}
	switch {
	case p == "":
		return Errorf(EINVALID, "A file needs a name.")
	case !utf8.ValidString(p):
		return bad("is not valid UTF-8")
	case len(p) > MaxDataPathBytes:
		return bad(fmt.Sprintf("is %d bytes long; the limit is %d", len(p), MaxDataPathBytes))
	case strings.HasPrefix(p, "/"):
		return bad("is absolute")
	case strings.ContainsRune(p, '\\'):
		return bad("contains a backslash")
	}
	if i := strings.IndexFunc(p, hidden); i >= 0 {
		r, _ := utf8.DecodeRuneInString(p[i:])
		return bad(fmt.Sprintf("contains %s at character %d, which is invisible or reorders the text around it, so the name could pass for another", describeRune(r), utf8.RuneCountInString(p[:i])+1))
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxDataPathDepth {
		return bad(fmt.Sprintf("is %d names deep; the limit is %d", len(segs), MaxDataPathDepth))
	}
	for _, s := range segs {
		switch {
		case s == "":
			return bad("has an empty segment")
		case s == "." || s == "..":
			return bad(fmt.Sprintf("contains %q", s))
		case strings.TrimFunc(s, blankOrDot) == "":
			return bad(fmt.Sprintf("has a name made only of dots and spaces (%+q), which shows as no name or as a folder's own link", s))
		}
	}
	return nil
}

// blankOrDot reports whether r is a space or a dot (or a character drawn as one): a name
// made only of them (" .. ", "...", "\u3000") names nothing a person can tell apart.
func blankOrDot(r rune) bool {
	return unicode.IsSpace(r) || unicode.Is(unicode.Zs, r) || strings.ContainsRune(".\u2024\uFE52\uFF0E", r)
}

// hidden reports whether r has no place in a file name because it cannot be seen or
// it changes how the characters around it are shown: control characters, line and
// paragraph separators, and format characters (zero-width spaces and joiners, the
// byte-order mark, bidirectional embeddings, overrides, isolates and marks, tags).
// With one, "invoice\u202egnp.py" shows as "invoiceyp.png".
func hidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// describeRune names r for a person: "U+202E RIGHT-TO-LEFT OVERRIDE", or "U+001B, a
// control character," (control characters have no names of their own).
func describeRune(r rune) string {
	if name := runenames.Name(r); name != "" && !strings.HasPrefix(name, "<") {
		return fmt.Sprintf("U+%04X %s", r, name)
	}
	return fmt.Sprintf("U+%04X, a control character,", r)
}

// MaxArtifactNameChars bounds the name a file from a run is stored under.
const MaxArtifactNameChars = 255

// ArtifactName is the name a file made by Python is stored under. Such a file is kept
// whatever its name, so the run loses nothing; but the name is shown and downloaded as
// a name, so it is made plain: valid UTF-8, NFC, each hidden character written as its
// code point between underscores ("invoice_U+202E_gnp.py"), at most
// MaxArtifactNameChars characters (a longer one keeps its start and its extension
// with a marker between).
func ArtifactName(name string) string {
	name = norm.NFC.String(strings.ToValidUTF8(name, "\uFFFD"))
	if strings.ContainsFunc(name, hidden) {
		var b strings.Builder
		for _, r := range name {
			if hidden(r) {
				fmt.Fprintf(&b, "_U+%04X_", r)
			} else {
				b.WriteRune(r)
			}
		}
		name = b.String()
	}
	if name == "" {
		return "unnamed"
	}
	runes := []rune(name)
	if len(runes) <= MaxArtifactNameChars {
		return name
	}
	ext := []rune(path.Ext(name))
	if len(ext) > 16 {
		ext = nil
	}
	const mark = "…"
	keep := MaxArtifactNameChars - len(ext) - 1
	return string(runes[:keep]) + mark + string(ext)
}

// UniqueArtifactName is ArtifactName(name) or, when taken says that name is in use
// (another file of the same run whose name has the same plain form), the first of
// "name-2.ext", "name-3.ext"… that is free, shortened to stay within
// MaxArtifactNameChars.
func UniqueArtifactName(name string, taken func(string) bool) string {
	name = ArtifactName(name)
	if !taken(name) {
		return name
	}
	ext := path.Ext(name)
	if utf8.RuneCountInString(ext) > 16 || ext == name {
		ext = ""
	}
	base := []rune(strings.TrimSuffix(name, ext))
	for i := 2; ; i++ {
		suffix := "-" + strconv.Itoa(i) + ext
		b := base
		if over := len(b) + utf8.RuneCountInString(suffix) - MaxArtifactNameChars; over > 0 {
			b = b[:max(len(b)-over, 0)]
		}
		if n := string(b) + suffix; !taken(n) {
			return n
		}
	}
}
