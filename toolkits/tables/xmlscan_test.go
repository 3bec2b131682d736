package tables

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestTextAcrossReads: text is unescaped alike wherever its input is cut between two
// reads: a reference (&amp;) or a line end (\r\n) cut in two is read whole.
func TestTextAcrossReads(t *testing.T) {
	t.Parallel()
	doc := "<si><t>a &amp; b &lt;c&gt; &#233;&#x20AC; line\r\nend\rx &quot;</t></si>"
	want := "a & b <c> é€ line\nend\nx \""
	text := func(r io.Reader) string {
		sc := newXMLScanner(r)
		var got []byte
		for {
			tok, err := sc.next()
			if err == io.EOF {
				return string(got)
			} else if err != nil {
				t.Fatal(err)
			}
			if tok.kind == tokText {
				got = appendText(got, tok.text)
			}
		}
	}
	if got := text(iotest.OneByteReader(strings.NewReader(doc))); got != want {
		t.Fatalf("a byte at a time: %q, want %q", got, want)
	}
	for cut := range len(doc) {
		if got := text(io.MultiReader(strings.NewReader(doc[:cut]), strings.NewReader(doc[cut:]))); got != want {
			t.Fatalf("cut at %d: %q, want %q", cut, got, want)
		}
	}
}
