package sandbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// A base snapshot reaches session processes as a file of the engine's, packed: its
// header, a hash of every block of its heap, then only the heap pages that are not all
// zeros (about half of a fresh interpreter's heap is zeros: the C stack's unused depth
// and the free top of the heap). Every process of the node reads the one file, through
// the page cache: the process reads those pages straight into wasm memory and leaves
// the rest untouched, and neither a pipe nor a buffer of the process ever holds the base
// (runtime/worker/base.ts, readBase; restore.ts, fillHeap). The hashes are what a process
// keeps of the base to tell which blocks of its heap a checkpoint sends (checkpoint.ts):
// computed here once per base instead of in every process.
//
// Layout, little-endian:
//
//	u32 header length H, u32 heap length L, u32 page size P, u32 page count N,
//	u32 hash block size B, u32 hashed block count K (L / B), u32 0, u32 0
//	the header (H bytes), padded to 16
//	N u32 page numbers, ascending, padded to 16
//	K pairs of u32 hashes (blockHash), padded to P
//	N pages of P bytes (the last one padded with zeros if the heap ends inside it)
const (
	basePage       = 4096
	baseHashBlock  = 256 // worker/base.ts, PAGE
	basePackedHead = 32
)

func pad16(n int) int { return (n + 15) &^ 15 }

func padTo(n, to int) int { return (n + to - 1) / to * to }

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
	blocks := len(heap) / baseHashBlock
	idxAt := basePackedHead + pad16(len(header))
	hashAt := idxAt + pad16(4*len(pages))
	dataAt := padTo(hashAt+8*blocks, basePage)
	out := make([]byte, dataAt+len(pages)*basePage)
	for i, v := range []uint32{uint32(len(header)), uint32(len(heap)), basePage, uint32(len(pages)), baseHashBlock, uint32(blocks)} {
		le.PutUint32(out[4*i:], v)
	}
	copy(out[basePackedHead:], header)
	for k, p := range pages {
		le.PutUint32(out[idxAt+4*k:], p)
		start := int(p) * basePage
		copy(out[dataAt+k*basePage:], heap[start:min(start+basePage, len(heap))])
	}
	for q := range blocks {
		h1, h2 := blockHash(heap[q*baseHashBlock:(q+1)*baseHashBlock], uint32(q*baseHashBlock/4))
		le.PutUint32(out[hashAt+8*q:], h1)
		le.PutUint32(out[hashAt+8*q+4:], h2)
	}
	return out
}

// blockHash is worker/base.ts's hashBlock, to the bit: two 32-bit lanes over one block of
// baseHashBlock bytes whose first word is word at of the heap (the second lane weighs
// each word by its place). A block of zeros hashes the same wherever it lies.
func blockHash(b []byte, at uint32) (uint32, uint32) {
	le := binary.LittleEndian
	h1, h2, h3 := uint32(0x2545f491), uint32(0x6a09e667), uint32(0x3c6ef372)
	for i := uint32(0); i < baseHashBlock/4; i += 2 {
		w, v, j := le.Uint32(b[4*i:]), le.Uint32(b[4*i+4:]), at+i
		h1 = (h1^w)*0x9e3779b1 ^ h1>>15
		h3 = (h3^v)*0x85ebca6b ^ h3>>13
		h2 += w*(j<<1|1) + v*(j<<1|3)
	}
	return h1 ^ h3*0xcc9e2d51, h2
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

// baseFiles writes the packed bases processes are primed with into dir, each named by
// the snapshot's hash, once per base: every process the engine starts is primed with
// the current base, so it is packed once, not per start. The files of the last few
// bases are kept (sessions saved against an older base restore from it); a file that
// went missing is written again.
type baseFiles struct {
	dir string

	mu sync.Mutex // guards recent and kept, and the writing of the files
	// The two snapshots named last (compared by identity: the engine's copy of the
	// current base, and the last other one restored from), and their files. No older
	// snapshot is held: naming one again hashes it.
	recent [2]baseFile
	kept   []string // the files written, most recent first, at most keptBaseFiles
}

type baseFile struct {
	of   []byte
	name string
}

const keptBaseFiles = 4

// name is the file of snap's packed form in dir, written if it is not there; "" for no
// base.
func (c *baseFiles) name(snap []byte) (string, error) {
	if len(snap) == 0 {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var name string
	for _, f := range c.recent {
		if len(f.of) == len(snap) && unsafe.SliceData(f.of) == unsafe.SliceData(snap) {
			name = f.name
		}
	}
	if name == "" {
		sum := sha256.Sum256(snap)
		name = hex.EncodeToString(sum[:16]) + ".base"
	}
	if _, err := os.Stat(filepath.Join(c.dir, name)); err != nil {
		if err := pkgs.WriteAtomic(c.dir, name, packBase(snap)); err != nil {
			return "", fmt.Errorf("write the packed base: %w", err)
		}
	}
	if f := c.recent[0]; unsafe.SliceData(f.of) != unsafe.SliceData(snap) {
		c.recent[0], c.recent[1] = baseFile{of: snap, name: name}, f
	}
	if len(c.kept) > 0 && c.kept[0] == name {
		return name, nil // the same base as the last start: nothing to rotate
	}
	c.kept = append([]string{name}, slices.DeleteFunc(c.kept, func(k string) bool { return k == name })...)
	for _, old := range c.kept[min(len(c.kept), keptBaseFiles):] {
		// A process that has it open still reads it.
		_ = os.Remove(filepath.Join(c.dir, old))
	}
	c.kept = c.kept[:min(len(c.kept), keptBaseFiles)]
	return name, nil
}
