package tables

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// scanText is the text the scanner reads of r, unescaped.
func scanText(t *testing.T, r io.Reader) string {
	t.Helper()
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

// TestTextAcrossReads: text is unescaped alike wherever its input is cut between two
// reads: a reference (&amp;) or a line end (\r\n) cut in two is read whole.
func TestTextAcrossReads(t *testing.T) {
	t.Parallel()
	doc := "<si><t>a &amp; b &lt;c&gt; &#233;&#x20AC; line\r\nend\rx &quot;</t></si>"
	want := "a & b <c> é€ line\nend\nx \""
	if got := scanText(t, iotest.OneByteReader(strings.NewReader(doc))); got != want {
		t.Fatalf("a byte at a time: %q, want %q", got, want)
	}
	for cut := range len(doc) {
		if got := scanText(t, io.MultiReader(strings.NewReader(doc[:cut]), strings.NewReader(doc[cut:]))); got != want {
			t.Fatalf("cut at %d: %q, want %q", cut, got, want)
		}
	}
}

// TestTextEndsWithAnUnfinishedReference: text that ends the input with an & that no ;
// follows is read as it is, wherever the input is cut. FuzzXMLScan found it handed out
// from where the buffer held it before a refill moved it.
func TestTextEndsWithAnUnfinishedReference(t *testing.T) {
	t.Parallel()
	doc := "<?x?>000000000000000&000000000000000&000000&0000000000000000&000"
	for cut := range len(doc) {
		if got := scanText(t, io.MultiReader(strings.NewReader(doc[:cut]), strings.NewReader(doc[cut:]))); got != doc[5:] {
			t.Fatalf("cut at %d: %q", cut, got)
		}
	}
}
