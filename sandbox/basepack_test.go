package sandbox

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPackBase checks the packed base against the layout runtime/worker/base.ts reads
// (readBase): the header as it was, the hashes of every block, the non-zero pages in
// order from a page boundary of the file, and the last page padded when the heap ends
// inside it.
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
	var f [6]uint32
	for i := range f {
		f[i] = le.Uint32(p[4*i:])
	}
	blocks := len(heap) / baseHashBlock
	if f != [6]uint32{ho, uint32(len(heap)), basePage, 3, baseHashBlock, uint32(blocks)} {
		t.Fatalf("fields %v", f)
	}
	if !bytes.Equal(p[basePackedHead:basePackedHead+ho], snap[:ho]) {
		t.Fatal("header changed")
	}
	idxAt := basePackedHead + pad16(ho)
	hashAt := idxAt + pad16(4*3)
	dataAt := padTo(hashAt+8*blocks, basePage)
	if dataAt%basePage != 0 || len(p) != dataAt+3*basePage {
		t.Fatalf("layout: hashes %d data %d len %d", hashAt, dataAt, len(p))
	}
	for q := range blocks {
		h1, h2 := blockHash(heap[q*baseHashBlock:(q+1)*baseHashBlock], uint32(q*baseHashBlock/4))
		if le.Uint32(p[hashAt+8*q:]) != h1 || le.Uint32(p[hashAt+8*q+4:]) != h2 {
			t.Fatalf("hash of block %d", q)
		}
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

	c := baseFiles{dir: t.TempDir()}
	a, err := c.name(snap)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.name(snap); a != b {
		t.Fatal("the same base has two files")
	}
	if got, err := os.ReadFile(filepath.Join(c.dir, a)); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("the file is not the packed base: %v", err)
	}
	if err := os.Remove(filepath.Join(c.dir, a)); err != nil {
		t.Fatal(err)
	}
	if b, err := c.name(snap); err != nil || b != a || !fileExists(filepath.Join(c.dir, a)) {
		t.Fatalf("a removed file is not written again: %v", err)
	}
	if n, err := c.name(nil); n != "" || err != nil {
		t.Fatal("no base names a file")
	}
	// Older bases: the last few are kept, and the oldest file goes.
	var names []string
	for i := range keptBaseFiles + 1 {
		other := slices.Clone(snap)
		other[ho+10] = byte(i + 1)
		n, err := c.name(other)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if fileExists(filepath.Join(c.dir, a)) || !fileExists(filepath.Join(c.dir, names[len(names)-1])) {
		t.Fatal("the files kept are not the last ones")
	}
}

// TestBlockHashMatchesWorker holds the engine's hash of the base's blocks against the
// worker's own (runtime/worker/base.ts, hashBlock, run by Deno): a block whose two hashes
// differ would be sent by every checkpoint as changed.
func TestBlockHashMatchesWorker(t *testing.T) {
	cfg := testConfig("unused")
	requireRuntime(t, cfg)
	src, err := os.ReadFile(filepath.Join(cfg.RuntimeDir, "worker", "base.ts"))
	if err != nil {
		t.Fatal(err)
	}
	fn, ok := between(string(src), "// hashBlock:begin\n", "// hashBlock:end")
	if !ok {
		t.Fatal("worker/base.ts has no hashBlock between its markers")
	}
	heap := make([]byte, 8*baseHashBlock)
	for i := range heap {
		heap[i] = byte(i*131 + i>>7)
	}
	copy(heap[3*baseHashBlock:4*baseHashBlock], make([]byte, baseHashBlock)) // a block of zeros
	const first = 1 << 20                                                    // the blocks' place in a heap: word 4 MiB/4
	script := fmt.Sprintf("const PAGE = %d;\nlet hash2 = 0;\n%s\n", baseHashBlock, fn) + `
const bytes = Uint8Array.from(atob(Deno.args[0]), (c) => c.charCodeAt(0));
const w32 = new Int32Array(` + strconv.Itoa(first) + ` + bytes.length / 4);
w32.set(new Int32Array(bytes.buffer), ` + strconv.Itoa(first) + `);
const out = [];
for (let s = ` + strconv.Itoa(first) + `; s < w32.length; s += PAGE / 4) out.push([hashBlock(w32, s) >>> 0, hash2 >>> 0]);
console.log(JSON.stringify(out));`
	file := filepath.Join(t.TempDir(), "hash.ts")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cfg.DenoPath, "run", "--no-config", "--quiet", file, base64.StdEncoding.EncodeToString(heap)).CombinedOutput()
	if err != nil {
		t.Fatalf("deno: %v: %s", err, out)
	}
	var got [][2]uint32
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != len(heap)/baseHashBlock {
		t.Fatalf("%d hashes for %d blocks", len(got), len(heap)/baseHashBlock)
	}
	for q, h := range got {
		h1, h2 := blockHash(heap[q*baseHashBlock:(q+1)*baseHashBlock], uint32(first+q*baseHashBlock/4))
		if h != [2]uint32{h1, h2} {
			t.Fatalf("block %d: the worker hashes %08x %08x, the engine %08x %08x", q, h[0], h[1], h1, h2)
		}
	}
}

func between(s, from, to string) (string, bool) {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return "", false
	}
	in, _, ok := strings.Cut(rest, to)
	return in, ok
}
