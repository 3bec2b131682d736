package sandchat_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandchat/sandchat"
)

// TestCheckDataPath is the whole rule for paths under /data; the stores and the API
// only show that they apply it.
func TestCheckDataPath(t *testing.T) {
	// "cafe\u0301.csv" (not NFC) passes: DataPath normalises what is stored, and
	// uploads stored before it must still mount.
	for _, p := range []string{"q1.csv", "reports/2025/q1.csv", "é/ü.txt", ".hidden", "a..b.csv", "cafe\u0301.csv", "..a", "a. b",
		strings.Repeat("d/", sandchat.MaxDataPathDepth-1) + "f.csv", strings.Repeat("x", sandchat.MaxDataPathBytes)} {
		if err := sandchat.CheckDataPath(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	for name, tc := range map[string]struct{ path, says string }{
		"parent":         {"../etc/passwd", `contains ".."`},
		"inner parent":   {"a/../../b.csv", `contains ".."`},
		"dot":            {"./a.csv", `contains "."`},
		"spaced parent":  {" .. ", `made only of dots and spaces (" .. ")`},
		"spaced folder":  {"a/ ./b.csv", `made only of dots and spaces (" .")`},
		"three dots":     {"...", "made only of dots and spaces"},
		"blank":          {"   ", "made only of dots and spaces"},
		"wide blank":     {"\u3000", `made only of dots and spaces ("\u3000")`},
		"wide dots":      {"\uff0e\uff0e/x.csv", `made only of dots and spaces ("\uff0e\uff0e")`},
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

// TestCheckDataPathLookAlikes: a name holding a character that is invisible or reorders
// the text around it can pass for another name, so it is refused, the detail naming the
// character and where it is.
func TestCheckDataPathLookAlikes(t *testing.T) {
	for _, tc := range []struct{ class, path, says string }{
		{"right-to-left override", "invoice\u202egnp.py", "U+202E RIGHT-TO-LEFT OVERRIDE at character 8"},
		{"left-to-right override", "a\u202db.csv", "U+202D LEFT-TO-RIGHT OVERRIDE at character 2"},
		{"embedding", "\u202areport.csv", "U+202A LEFT-TO-RIGHT EMBEDDING at character 1"},
		{"pop directional formatting", "a\u202c.csv", "U+202C POP DIRECTIONAL FORMATTING at character 2"},
		{"isolate", "r/\u2067x.csv", "U+2067 RIGHT-TO-LEFT ISOLATE at character 3"},
		{"pop isolate", "x\u2069.csv", "U+2069 POP DIRECTIONAL ISOLATE at character 2"},
		{"left-to-right mark", "x\u200e.csv", "U+200E LEFT-TO-RIGHT MARK at character 2"},
		{"right-to-left mark", "x\u200f.csv", "U+200F RIGHT-TO-LEFT MARK at character 2"},
		{"arabic letter mark", "x\u061c.csv", "U+061C ARABIC LETTER MARK at character 2"},
		{"zero width space", "pay\u200broll.csv", "U+200B ZERO WIDTH SPACE at character 4"},
		{"zero width non-joiner", "a\u200cb.csv", "U+200C ZERO WIDTH NON-JOINER at character 2"},
		{"zero width joiner", "a\u200db.csv", "U+200D ZERO WIDTH JOINER at character 2"},
		{"word joiner", "a\u2060b.csv", "U+2060 WORD JOINER at character 2"},
		{"byte order mark", "\ufeffdata.csv", "U+FEFF ZERO WIDTH NO-BREAK SPACE at character 1"},
		{"other format character", "soft\u00adhyphen.csv", "U+00AD SOFT HYPHEN at character 5"},
		{"tag character", "flag\U000e0041.csv", "U+E0041 TAG LATIN CAPITAL LETTER A at character 5"},
		{"line separator", "a\u2028b.csv", "U+2028 LINE SEPARATOR at character 2"},
		{"paragraph separator", "a\u2029b.csv", "U+2029 PARAGRAPH SEPARATOR at character 2"},
		{"C0 control", "a\x1bb.csv", "U+001B, a control character, at character 2"},
		{"C1 control", "a\u0085b.csv", "U+0085, a control character, at character 2"},
		{"after multibyte characters", "é/ü\u202e.txt", "U+202E RIGHT-TO-LEFT OVERRIDE at character 4"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			err := sandchat.CheckDataPath(tc.path)
			if sandchat.ErrorCode(err) != sandchat.EINVALID || !strings.Contains(sandchat.ErrorMessage(err), tc.says) {
				t.Fatalf("%q: %v, want %s saying %q", tc.path, err, sandchat.EINVALID, tc.says)
			}
			if msg := sandchat.ErrorMessage(err); strings.ContainsFunc(msg, func(r rune) bool { return strings.ContainsRune(tc.path, r) && r > 0x7f && r != 'é' && r != 'ü' }) {
				t.Fatalf("the detail %q carries the character itself: it must show it escaped", msg)
			}
		})
	}
}

// TestDataPath: what a client sends is normalised to NFC before the rule applies, so a
// name typed on a system that decomposes accents is the name Python's code spells.
func TestDataPath(t *testing.T) {
	for in, want := range map[string]string{
		"cafe\u0301.csv":       "caf\u00e9.csv",
		"caf\u00e9.csv":        "caf\u00e9.csv",
		"A\u030angstro\u0308m": "\u00c5ngstr\u00f6m",
		"reports/q1.csv":       "reports/q1.csv",
	} {
		got, err := sandchat.DataPath(in)
		if err != nil || got != want {
			t.Errorf("DataPath(%+q) = %+q, %v; want %+q", in, got, err, want)
		}
	}
	if _, err := sandchat.DataPath("x\u202e.csv"); sandchat.ErrorCode(err) != sandchat.EINVALID {
		t.Errorf("DataPath let a right-to-left override through: %v", err)
	}
}

// TestArtifactName: a file Python made is never refused for its name (the run is not
// lost); it is stored under a name that says what was in it: each hidden character
// written as its code point, valid UTF-8, NFC, at most 255 characters.
func TestArtifactName(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"short", "plot.png", "plot.png"},
		{"right-to-left override", "invoice\u202egnp.py", "invoice_U+202E_gnp.py"},
		{"zero width space", "pay\u200broll.csv", "pay_U+200B_roll.csv"},
		{"byte order mark", "\ufeffdata.csv", "_U+FEFF_data.csv"},
		{"control", "a\tb.txt", "a_U+0009_b.txt"},
		{"NUL", "a\x00b.txt", "a_U+0000_b.txt"},
		{"invalid UTF-8", "a\xffc.txt", "a\ufffdc.txt"},
		{"not NFC", "cafe\u0301.csv", "caf\u00e9.csv"},
		{"empty", "", "unnamed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandchat.ArtifactName(tc.in); got != tc.want {
				t.Fatalf("ArtifactName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	for _, in := range []string{strings.Repeat("d/", 200) + "table.csv", strings.Repeat("é", 300) + ".txt", strings.Repeat("\u200b", 100) + ".txt"} {
		got := sandchat.ArtifactName(in)
		if n := utf8.RuneCountInString(got); n > 255 || !strings.HasSuffix(got, "…"+in[strings.LastIndex(in, "."):]) {
			t.Errorf("long name %.40q… stored as %.40q… (%d characters), want at most 255 ending with its extension", in, got, n)
		}
	}
}

// TestUniqueArtifactName: files of one run whose names have the same plain form are
// stored under names of their own, each within the limit and keeping its extension.
func TestUniqueArtifactName(t *testing.T) {
	t.Parallel()
	taken := map[string]bool{}
	add := func(in string) string {
		n := sandchat.UniqueArtifactName(in, func(s string) bool { return taken[s] })
		taken[n] = true
		return n
	}
	for _, tc := range []struct{ in, want string }{
		{"caf\u00e9.csv", "caf\u00e9.csv"},
		{"cafe\u0301.csv", "caf\u00e9-2.csv"},
		{"caf\u00e9.csv", "caf\u00e9-3.csv"},
		{"invoice\u202egnp.py", "invoice_U+202E_gnp.py"},
		{"invoice_U+202E_gnp.py", "invoice_U+202E_gnp-2.py"},
		{"README", "README"},
		{"README", "README-2"},
		{".env", ".env"},
		{".env", ".env-2"},
	} {
		if got := add(tc.in); got != tc.want {
			t.Errorf("UniqueArtifactName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("x", 300) + ".csv"
	first, second := add(long), add(long)
	if first == second || utf8.RuneCountInString(second) > sandchat.MaxArtifactNameChars || !strings.HasSuffix(second, "-2.csv") ||
		sandchat.ArtifactName(second) != second {
		t.Errorf("a long name twice: %q then %q; want two plain names within %d characters, the second ending -2.csv", first, second, sandchat.MaxArtifactNameChars)
	}
}
