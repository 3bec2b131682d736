package sandchat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Size says how big a file is the way people read it: "12.5 MiB", "256 MiB", "3 KiB".
func Size(n int64) string {
	unit, name := int64(1), "bytes"
	switch {
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

// CheckDataPath accepts a path under /data made of plain names: relative, no empty,
// "." or ".." segments, no backslashes or control characters, at most
// MaxDataPathBytes long and MaxDataPathDepth names deep.
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
	case strings.ContainsFunc(p, unicode.IsControl):
		return bad("contains a control character")
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxDataPathDepth {
		return bad(fmt.Sprintf("is %d names deep; the limit is %d", len(segs), MaxDataPathDepth))
	}
	for _, s := range segs {
		switch s {
		case "":
			return bad("has an empty segment")
		case ".", "..":
			return bad(fmt.Sprintf("contains %q", s))
		}
	}
	return nil
}
