package sandchat_test

import (
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestCheckDataPath is the whole rule for paths under /data; the stores and the API
// only show that they apply it.
func TestCheckDataPath(t *testing.T) {
	for _, p := range []string{"q1.csv", "reports/2025/q1.csv", "é/ü.txt", ".hidden", "a..b.csv",
		strings.Repeat("d/", sandchat.MaxDataPathDepth-1) + "f.csv", strings.Repeat("x", sandchat.MaxDataPathBytes)} {
		if err := sandchat.CheckDataPath(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	for name, tc := range map[string]struct{ path, says string }{
		"parent":         {"../etc/passwd", `contains ".."`},
		"inner parent":   {"a/../../b.csv", `contains ".."`},
		"dot":            {"./a.csv", `contains "."`},
		"absolute":       {"/etc/passwd", "is absolute"},
		"empty segment":  {"a//b.csv", "empty segment"},
		"trailing slash": {"a/b/", "empty segment"},
		"newline":        {"a\nb.csv", "control character"},
		"tab":            {"a\tb.csv", "control character"},
		"NUL":            {"a\x00b.csv", "control character"},
		"backslash":      {`..\evil.csv`, "backslash"},
		"too deep":       {strings.Repeat("d/", sandchat.MaxDataPathDepth) + "f.csv", "names deep; the limit is 8"},
		"too long":       {strings.Repeat("x", sandchat.MaxDataPathBytes+1), "256 bytes long; the limit is 255"},
		"empty":          {"", "needs a name"},
		"invalid UTF-8":  {"a\xffb.csv", "not valid UTF-8"},
	} {
		err := sandchat.CheckDataPath(tc.path)
		if sandchat.ErrorCode(err) != sandchat.EINVALID || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s %q: %v, want %s saying %q", name, tc.path, err, sandchat.EINVALID, tc.says)
		}
	}
}
