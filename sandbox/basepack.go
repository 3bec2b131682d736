package sandbox

import (
	"crypto/subtle"
	"encoding/binary"
	"slices"
	"sync"
	"unsafe"
)

// A base snapshot travels to a session process packed: its header, then only the heap
// pages that are not all zeros (about half of a fresh interpreter's heap is zeros: the
// C stack's unused depth and the free top of the heap). The process writes those pages
// into wasm memory and leaves the rest untouched, so neither the frame it reads nor the
// interpreter's memory ever holds the zeros (runtime/worker.ts, readBase).
//
// Layout, little-endian, every part 16-aligned from the start of the blob (the frame
// puts the blob itself on a 16-byte boundary):
//
//	u32 header length H, u32 heap length L, u32 page size P, u32 page count N
//	the header (H bytes), padded
//	N u32 page numbers, ascending, padded
//	N pages of P bytes (the last one padded with zeros if the heap ends inside it)
const basePage = 4096

func pad16(n int) int { return (n + 15) &^ 15 }

// packBase packs a base snapshot (Pyodide's layout: u32 magic, u32 heap offset, …).
// A snapshot too short to hold a header is packed as a header with an empty heap.
func packBase(snap []byte) []byte {
	le := binary.LittleEndian
	ho := len(snap)
	if len(snap) >= 8 {
		ho = min(int(le.Uint32(snap[4:])), len(snap))
	}
	header, heap := snap[:ho], snap[ho:]
	var pages []uint32
	for p := 0; p*basePage < len(heap); p++ {
		if !allZero(heap[p*basePage : min((p+1)*basePage, len(heap))]) {
			pages = append(pages, uint32(p))
		}
	}
	idxAt := 16 + pad16(len(header))
	dataAt := idxAt + pad16(4*len(pages))
	out := make([]byte, dataAt+len(pages)*basePage)
	le.PutUint32(out[0:], uint32(len(header)))
	le.PutUint32(out[4:], uint32(len(heap)))
	le.PutUint32(out[8:], basePage)
	le.PutUint32(out[12:], uint32(len(pages)))
	copy(out[16:], header)
	for k, p := range pages {
		le.PutUint32(out[idxAt+4*k:], p)
		start := int(p) * basePage
		copy(out[dataAt+k*basePage:], heap[start:min(start+basePage, len(heap))])
	}
	return out
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// basePacks keeps the packed form of the base last packed: every process the engine
// starts is primed with the current base, so it is packed once per base, not per start.
type basePacks struct {
	mu     sync.Mutex
	of     []byte // the snapshot packed (the engine's copy: compared by identity)
	packed []byte
}

func (c *basePacks) get(snap []byte) []byte {
	if len(snap) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.of) == len(snap) && unsafe.SliceData(c.of) == unsafe.SliceData(snap) {
		return c.packed
	}
	c.of, c.packed = snap, packBase(snap)
	return c.packed
}

// xorBase turns a heap delta between the forms the process and the store keep: the
// process sends and takes the changed heap blocks as they are, the store keeps them
// XOR-ed with the base's (mostly zeros, so they compress well). The same XOR goes both
// ways. Layout (runtime/worker.ts, diffHeap): u32 heap length, u32 block count, u32
// block size, u32 block indexes, the blocks; little-endian. A delta that does not hold
// together is returned as it is: the restore that reads it fails.
func xorBase(base, delta []byte) []byte {
	if len(delta) < 12 || len(base) < 8 {
		return delta
	}
	le := binary.LittleEndian
	count, size := int64(le.Uint32(delta[4:])), int64(le.Uint32(delta[8:]))
	ho := int64(le.Uint32(base[4:]))
	if size == 0 || ho > int64(len(base)) || 12+count*(4+size) != int64(len(delta)) {
		return delta
	}
	heap := base[ho:]
	out := slices.Clone(delta)
	blocks := out[12+4*count:]
	for k := range count {
		start := int64(le.Uint32(out[12+4*k:])) * size
		if start >= int64(len(heap)) {
			continue
		}
		b := blocks[k*size : (k+1)*size]
		subtle.XORBytes(b, b, heap[start:min(start+size, int64(len(heap)))])
	}
	return out
}
