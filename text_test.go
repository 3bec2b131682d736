package sandchat_test

import (
	"testing"

	"github.com/sandchat/sandchat"
)

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"fits", "abc", 3, "abc"},
		{"fits with room", "abc", 10, "abc"},
		{"ASCII", "abcdef", 4, "abcd…"},
		{"inside a 2-byte character", "aé", 2, "a…"},
		{"after a 2-byte character", "aéb", 3, "aé…"},
		{"inside a 3-byte character", "a€b", 2, "a…"},
		{"inside a 3-byte character, last byte", "a€b", 3, "a…"},
		{"inside a 4-byte character", "a😀b", 4, "a…"},
		{"after a 4-byte character", "a😀b", 5, "a😀…"},
		{"nothing fits", "€", 2, "…"},
		{"zero", "abc", 0, "…"},
		{"negative", "abc", -1, "…"},
		{"not UTF-8: cut at n", "a\x80\x80\x80\x80\x80", 4, "a\x80\x80\x80…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandchat.TruncateUTF8(tc.s, tc.n, "…"); got != tc.want {
				t.Fatalf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}
