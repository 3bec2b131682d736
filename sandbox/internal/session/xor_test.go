package session

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestXorBase checks the engine's half of the heap delta: the blocks a process sends
// are XOR-ed with the base's (past the base's heap, with zeros), the same XOR undoes it,
// and a delta that does not hold together comes back untouched.
func TestXorBase(t *testing.T) {
	const ho, heapLen, size = 48, 1024, 256
	base := make([]byte, ho+heapLen)
	binary.LittleEndian.PutUint32(base[4:], ho)
	r := rand.New(rand.NewPCG(1, 2))
	for i := ho; i < len(base); i++ {
		base[i] = byte(r.Uint32())
	}
	// Blocks 1 and 3 of the base's heap, and block 5, past it.
	idx := []uint32{1, 3, 5}
	delta := make([]byte, 12+4*len(idx)+size*len(idx))
	binary.LittleEndian.PutUint32(delta[0:], 6*size)
	binary.LittleEndian.PutUint32(delta[4:], uint32(len(idx)))
	binary.LittleEndian.PutUint32(delta[8:], size)
	for k, i := range idx {
		binary.LittleEndian.PutUint32(delta[12+4*k:], i)
	}
	blocks := delta[12+4*len(idx):]
	for i := range blocks {
		blocks[i] = byte(r.Uint32())
	}
	x := xorBase(base, delta)
	xb := x[12+4*len(idx):]
	for k, i := range idx {
		for j := range size {
			want := blocks[k*size+j]
			if at := int(i)*size + j; at < heapLen {
				want ^= base[ho+at]
			}
			if xb[k*size+j] != want {
				t.Fatalf("block %d byte %d: got %#x, want %#x", i, j, xb[k*size+j], want)
			}
		}
	}
	if !bytes.Equal(xorBase(base, x), delta) {
		t.Fatal("the XOR does not undo itself")
	}
	if bytes.Equal(x, delta) {
		t.Fatal("the delta was not XOR-ed")
	}
	for _, bad := range [][]byte{nil, delta[:11], delta[:len(delta)-1], append(delta[:len(delta):len(delta)], 0)} {
		if got := xorBase(base, bad); !bytes.Equal(got, bad) {
			t.Fatalf("a malformed delta of %d bytes was changed", len(bad))
		}
	}
	if got := xorBase(nil, delta); !bytes.Equal(got, delta) {
		t.Fatal("no base, yet the delta changed")
	}
}
