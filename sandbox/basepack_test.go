package sandbox

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestPackBase checks the packed base against the layout runtime/worker.ts reads
// (readBase): the header as it was, the non-zero pages in order, each part 16-aligned,
// and the last page padded when the heap ends inside it.
func TestPackBase(t *testing.T) {
	const ho = 40
	heap := make([]byte, 3*basePage+100)
	heap[5] = 1             // page 0
	heap[2*basePage+7] = 2  // page 2
	heap[3*basePage+99] = 3 // page 3, short
	snap := append(make([]byte, ho), heap...)
	binary.LittleEndian.PutUint32(snap[4:], ho)
	snap[0], snap[39] = 0xaa, 0xbb

	p := packBase(snap)
	le := binary.LittleEndian
	hl, heapLen, page, n := le.Uint32(p[0:]), le.Uint32(p[4:]), le.Uint32(p[8:]), le.Uint32(p[12:])
	if hl != ho || heapLen != uint32(len(heap)) || page != basePage || n != 3 {
		t.Fatalf("fields %d %d %d %d", hl, heapLen, page, n)
	}
	if !bytes.Equal(p[16:16+ho], snap[:ho]) {
		t.Fatal("header changed")
	}
	idxAt := 16 + pad16(ho)
	dataAt := idxAt + pad16(4*3)
	if idxAt%16 != 0 || dataAt%16 != 0 || len(p) != dataAt+3*basePage {
		t.Fatalf("layout: idx %d data %d len %d", idxAt, dataAt, len(p))
	}
	for k, want := range []uint32{0, 2, 3} {
		if got := le.Uint32(p[idxAt+4*k:]); got != want {
			t.Fatalf("page %d is %d, want %d", k, got, want)
		}
		start := int(want) * basePage
		got := p[dataAt+k*basePage : dataAt+(k+1)*basePage]
		orig := heap[start:min(start+basePage, len(heap))]
		if !bytes.Equal(got[:len(orig)], orig) || !allZero(got[len(orig):]) {
			t.Fatalf("page %d differs", want)
		}
	}

	var c basePacks
	if a, b := c.get(snap), c.get(snap); &a[0] != &b[0] {
		t.Fatal("the same base was packed twice")
	}
	if c.get(nil) != nil {
		t.Fatal("no base packs to nothing")
	}
}
