package sandchat_test

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sandchat/sandchat"
)

// Fuzz targets for the names clients and Python give files: an upload's path under
// /data, and the name a run's file is stored and downloaded under. Their seed corpora
// are in testdata/fuzz; `make fuzz` runs each for a few seconds.

// FuzzDataPath: a path is taken, normalised, only when it is relative, clean and made of
// plain names within the limits; normalising a taken path again changes nothing.
func FuzzDataPath(f *testing.F) {
	for _, p := range []string{"reports/2025/q1.csv", "cafe\u0301.csv", "../etc/passwd", "/abs", "a//b", "a/./b", "a\\b", "x\u202egnp.py", " .. ", "\u3000", "a/\u2024/b",
		strings.Repeat("a/", 9) + "x", strings.Repeat("é", 200), "\xff", "ﬀ.txt", "Ａ.csv"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		checked := sandchat.CheckDataPath(p)
		if checked == nil {
			switch {
			case !utf8.ValidString(p), len(p) > sandchat.MaxDataPathBytes, path.IsAbs(p), strings.ContainsRune(p, '\\'),
				path.Clean(p) != p, p == ".", p == "..", strings.HasPrefix(p, "../"), strings.Count(p, "/") >= sandchat.MaxDataPathDepth:
				t.Fatalf("%+q taken", p)
			}
		} else if sandchat.ErrorCode(checked) != sandchat.EINVALID || sandchat.ErrorMessage(checked) == "" {
			t.Fatalf("%+q refused without a reason for people: %v", p, checked)
		}
		n, err := sandchat.DataPath(p)
		if err != nil {
			return
		}
		if sandchat.CheckDataPath(n) != nil || !norm.NFC.IsNormalString(n) {
			t.Fatalf("%+q taken as %+q, which is not", p, n)
		}
		if again, err := sandchat.DataPath(n); err != nil || again != n {
			t.Fatalf("%+q taken as %+q, then as %+q, %v", p, n, again, err)
		}
	})
}

// FuzzArtifactName: any name Python gives a file is stored under a plain one: valid
// UTF-8, NFC, no hidden character, at most MaxArtifactNameChars, the same when made
// plain again; and a unique name is never one already taken.
func FuzzArtifactName(f *testing.F) {
	for _, n := range []string{"plot.png", "invoice\u202egnp.py", "a\x00b", "\xff\xfe", "", "cafe\u0301", strings.Repeat("x", 300) + ".csv", strings.Repeat("e\u0301", 200),
		strings.Repeat("a", 254) + "\u0301.txt", "README", ".env"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := sandchat.ArtifactName(name)
		if got == "" || !utf8.ValidString(got) || !norm.NFC.IsNormalString(got) || utf8.RuneCountInString(got) > sandchat.MaxArtifactNameChars {
			t.Fatalf("%+q stored as %+q", name, got)
		}
		if strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\u202e' || r == '\u200b' || r == '\ufeff' }) {
			t.Fatalf("%+q stored as %+q, which hides a character", name, got)
		}
		if again := sandchat.ArtifactName(got); again != got {
			t.Fatalf("%+q stored as %+q, then as %+q", name, got, again)
		}
		taken := map[string]bool{got: true}
		for range 3 {
			u := sandchat.UniqueArtifactName(name, func(s string) bool { return taken[s] })
			if taken[u] || utf8.RuneCountInString(u) > sandchat.MaxArtifactNameChars || !utf8.ValidString(u) {
				t.Fatalf("%+q made unique as %+q (taken: %v)", name, u, taken)
			}
			taken[u] = true
		}
	})
}
