package tables

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// inflateAll reads the stream comp with an inflater, in reads of n bytes.
func inflateAll(comp []byte, n int) ([]byte, error) {
	f := newInflater(iotest.HalfReader(bytes.NewReader(comp)))
	var out []byte
	buf := make([]byte, n)
	for {
		k, err := f.Read(buf)
		out = append(out, buf[:k]...)
		if err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
	}
}

// inflateInputs are data of the kinds a workbook's parts hold, and others.
func inflateInputs() map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	var sheet strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&sheet, `<row r="%d"><c r="A%d"><v>%d</v></c><c r="B%d" t="inlineStr"><is><t>name %d</t></is></c></row>`, i+1, i+1, i*7, i+1, i%97)
	}
	var words strings.Builder
	for range 60000 {
		words.WriteString([]string{"alpha ", "beta ", "gamma\n", "delta ", "é€ "}[r.IntN(5)])
	}
	skewed := make([]byte, 200<<10)
	for i := range skewed {
		skewed[i] = byte(r.ExpFloat64() * 3)
	}
	return map[string][]byte{
		"empty":  {},
		"one":    {'x'},
		"short":  []byte("hello, hello, hello"),
		"zeros":  make([]byte, 1<<20),
		"random": random,
		"sheet":  []byte(sheet.String()),
		"words":  []byte(words.String()),
		"skewed": skewed,
		"period": bytes.Repeat([]byte("abcdefg"), 100000),
	}
}

// TestInflateMatchesFlate: what the inflater unpacks is what was packed, at every
// level of compress/flate (stored, Huffman only, fixed and dynamic codes), in reads of
// any size, with flushes (empty stored blocks) between.
func TestInflateMatchesFlate(t *testing.T) {
	t.Parallel()
	for name, data := range inflateInputs() {
		for level := -2; level <= 9; level++ {
			for _, flush := range []bool{false, true} {
				var comp bytes.Buffer
				w, _ := flate.NewWriter(&comp, level)
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 70000)
					w.Write(rest[:n])
					rest = rest[n:]
					if flush {
						w.Flush()
					}
				}
				w.Close()
				for _, n := range []int{1, 4093, 1 << 20} {
					if n == 1 && len(data) > 100<<10 {
						continue
					}
					got, err := inflateAll(comp.Bytes(), n)
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("%s, level %d, flush %v, reads of %d: %d bytes of %d, %v", name, level, flush, n, len(got), len(data), err)
					}
				}
			}
		}
	}
}

// TestInflateCorrupt: a broken stream unpacks as compress/flate unpacks it, or ends in
// an error where that one does; never in a panic.
func TestInflateCorrupt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	inputs := inflateInputs()
	for _, name := range []string{"short", "sheet", "words", "skewed", "period"} {
		for _, level := range []int{-2, 0, 1, 6, 9} {
			var comp bytes.Buffer
			w, _ := flate.NewWriter(&comp, level)
			w.Write(inputs[name][:min(len(inputs[name]), 40000)])
			w.Close()
			for range 300 {
				broken := bytes.Clone(comp.Bytes())
				switch r.IntN(3) {
				case 0:
					broken = broken[:r.IntN(len(broken))]
				case 1:
					for range 1 + r.IntN(3) {
						broken[r.IntN(len(broken))] ^= byte(1 << r.IntN(8))
					}
				default:
					broken[r.IntN(len(broken))] = byte(r.Uint32())
				}
				compareWithFlate(t, broken)
			}
		}
	}
}

func compareWithFlate(t *testing.T, comp []byte) {
	t.Helper()
	want, wantErr := io.ReadAll(flate.NewReader(bytes.NewReader(comp)))
	got, err := inflateAll(comp, 4096)
	if (err == nil) != (wantErr == nil) || err == nil && !bytes.Equal(got, want) {
		t.Fatalf("stream %x:\n got %d bytes, %v\nwant %d bytes, %v", comp[:min(len(comp), 64)], len(got), err, len(want), wantErr)
	}
}

// FuzzInflate holds the inflater to compress/flate on any stream.
func FuzzInflate(f *testing.F) {
	for _, data := range inflateInputs() {
		for _, level := range []int{-2, 0, 1, 9} {
			var comp bytes.Buffer
			w, _ := flate.NewWriter(&comp, level)
			w.Write(data[:min(len(data), 2000)])
			w.Close()
			f.Add(comp.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, comp []byte) {
		compareWithFlate(t, comp)
	})
}
