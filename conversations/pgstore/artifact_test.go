package pgstore

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestArtifactName(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in string }{
		{"short", "plot.png"},
		{"long ascii", strings.Repeat("d/", 200) + "table.csv"},
		{"long multibyte", strings.Repeat("é", 300) + ".txt"},
		{"NUL and invalid UTF-8", "a\x00b\xffc.txt"},
		{"empty", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ArtifactName(tc.in)
			if got == "" || utf8.RuneCountInString(got) > 255 || !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
				t.Fatalf("ArtifactName(%q) = %q: not a storable name", tc.in, got)
			}
			if utf8.RuneCountInString(tc.in) <= 255 && utf8.ValidString(tc.in) && !strings.ContainsRune(tc.in, 0) && tc.in != "" && got != tc.in {
				t.Fatalf("a storable name was changed: %q", got)
			}
			if ext := tc.in[strings.LastIndex(tc.in, ".")+1:]; len(tc.in) > 255 && !strings.HasSuffix(got, "."+ext) {
				t.Fatalf("long name %q lost its extension", got)
			}
		})
	}
}
