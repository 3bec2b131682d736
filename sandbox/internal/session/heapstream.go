package session

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// A session's heap travels between its process and the store as a stream: a checkpoint
// reply's delta is XOR-ed with the base and compressed as it arrives, and a restore
// decompresses and XORs it as it goes out. The server holds a delta neither way, only
// its compressed form (what the store keeps, within the session's state limit) and
// buffers of a constant size: what a process claims to send costs it nothing more
// (TestForgedCheckpointCostsAConstant).

// The delta's layout (runtime/worker/checkpoint.ts, diffHeap): u32 heap length, u32 block count,
// u32 block size, the blocks' u32 indexes, the blocks; little-endian. A delta that does
// not hold together goes through unchanged: the restore that reads it fails.
const (
	// minDeltaBlock is the smallest block a delta may XOR: the process uses 256 bytes,
	// and smaller ones would make the index the server keeps as large as the delta.
	minDeltaBlock = 256
	// xorChunk is how much of a delta passes at a time.
	xorChunk = 256 << 10
	// maxHeapHeader bounds a checkpoint's snapshot header (the interpreter's JavaScript
	// side, a few KB): it is held whole.
	maxHeapHeader = 8 << 20
)

// xorStream copies the n-byte delta from r to w with its blocks XOR-ed with the base's
// heap (base: the base snapshot, its heap at the offset its header names; past the heap,
// with zeros). The same XOR goes both ways: the process sends and takes the changed
// blocks as they are, the store keeps them XOR-ed (mostly zeros, so they compress well).
// It holds the block indexes (n/65 bytes at most) and one chunk.
func xorStream(base []byte, r io.Reader, n int64, w io.Writer) error {
	if n < 12 || len(base) < 8 {
		_, err := io.CopyN(w, r, n)
		return err
	}
	le := binary.LittleEndian
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return err
	}
	if _, err := w.Write(pre[:]); err != nil {
		return err
	}
	count, size := int64(le.Uint32(pre[4:])), int64(le.Uint32(pre[8:]))
	ho := int64(le.Uint32(base[4:]))
	if size < minDeltaBlock || ho > int64(len(base)) || 12+count*(4+size) != n {
		_, err := io.CopyN(w, r, n-12)
		return err
	}
	idx := make([]byte, 4*count)
	if _, err := io.ReadFull(r, idx); err != nil {
		return err
	}
	if _, err := w.Write(idx); err != nil {
		return err
	}
	heap := base[ho:]
	chunk := make([]byte, min(count*size, xorChunk))
	for off, total := int64(0), count*size; off < total; {
		b := chunk[:min(int64(len(chunk)), total-off)]
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		// Each block's part in this chunk, XOR-ed with the base's bytes at its place.
		for p := off; p < off+int64(len(b)); {
			k := p / size
			end := min((k+1)*size, off+int64(len(b)))
			at := int64(le.Uint32(idx[4*k:]))*size + p%size
			if at < int64(len(heap)) {
				d := b[p-off : end-off]
				subtle.XORBytes(d, d, heap[at:min(at+end-p, int64(len(heap)))])
			}
			p = end
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

// xorBase is xorStream over bytes held whole (tests, and deltas of old records).
func xorBase(base, delta []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(delta))
	_ = xorStream(base, bytes.NewReader(delta), int64(len(delta)), &out)
	return out.Bytes()
}

// errDeltaOverLimit is a delta whose compressed form passes the state limit.
var errDeltaOverLimit = errors.New("over the limit")

// cappedBuffer keeps what is written to it up to max bytes, then refuses.
type cappedBuffer struct {
	b   []byte
	max int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if int64(len(c.b))+int64(len(p)) > c.max {
		return 0, errDeltaOverLimit
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// Compression of deltas, one encoder or decoder per stream at a time.
var (
	encoders = sync.Pool{New: func() any {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
		return e
	}}
	decoders = sync.Pool{New: func() any {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(4<<30))
		return d
	}}
)

// compressDelta compresses the n-byte delta from r, XOR-ed with base, keeping at most
// limit bytes of output (errDeltaOverLimit past them). Its frame records n.
func compressDelta(base []byte, r io.Reader, n, limit int64) ([]byte, error) {
	out := &cappedBuffer{max: limit}
	enc := encoders.Get().(*zstd.Encoder)
	defer func() {
		enc.Reset(nil) // the pool keeps no output alive
		encoders.Put(enc)
	}()
	enc.ResetContentSize(out, n)
	if err := xorStream(base, r, n, enc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.b, nil
}

// deltaBlob is a saved delta as a load request's blob: decompressed and XOR-ed with
// base as the frame goes out.
func deltaBlob(o *proc.Blobs, base, z []byte) (*proc.Blob, error) {
	var h zstd.Header
	if err := h.Decode(z); err != nil || !h.HasFCS || h.FrameContentSize > 1<<32 {
		// No length in its frame: held whole, as records saved without one were.
		dec := decoders.Get().(*zstd.Decoder)
		defer decoders.Put(dec)
		raw, err := dec.DecodeAll(z, nil)
		if err != nil {
			return nil, fmt.Errorf("decompress session state: %w", err)
		}
		return o.Add(xorBase(base, raw)), nil
	}
	n := int64(h.FrameContentSize)
	return o.AddStream(int(n), func(w io.Writer) error {
		dec := decoders.Get().(*zstd.Decoder)
		defer decoders.Put(dec)
		if err := dec.Reset(bytes.NewReader(z)); err != nil {
			return err
		}
		defer func() { _ = dec.Reset(nil) }()
		return xorStream(base, dec, n, w)
	}), nil
}

// heapIn takes a checkpoint reply's heap as it arrives (proc.Process.CallStream): the
// snapshot's header is kept, the delta compressed as it comes, within limit bytes.
type heapIn struct {
	base   []byte
	limit  int64
	header []byte
	delta  []byte // compressed
	over   bool   // the compressed delta passed limit
	err    error  // the reply's heap does not hold together
}

func (h *heapIn) receive(js json.RawMessage, bin io.Reader) error {
	var r proc.CheckpointReply
	if json.Unmarshal(js, &r) != nil || r.Header == nil || r.Delta == nil {
		return nil // no heap: the caller reads the reply
	}
	hb, db := r.Header.B, r.Delta.B
	if len(hb) != 2 || len(db) != 2 || hb[0] < 0 || hb[1] < 0 || hb[1] > maxHeapHeader || db[1] < 0 || db[0] < hb[0]+hb[1] {
		h.err = fmt.Errorf("snapshot blobs out of order or over their bounds")
		return h.err
	}
	read := func(skip, n int) ([]byte, error) {
		if _, err := io.CopyN(io.Discard, bin, int64(skip)); err != nil {
			return nil, err
		}
		b := make([]byte, n)
		_, err := io.ReadFull(bin, b)
		return b, err
	}
	var err error
	if h.header, err = read(hb[0], hb[1]); err != nil {
		h.err = fmt.Errorf("snapshot header: %w", err)
		return h.err
	}
	if _, err := io.CopyN(io.Discard, bin, int64(db[0]-hb[0]-hb[1])); err != nil {
		h.err = err
		return err
	}
	h.delta, err = compressDelta(h.base, bin, int64(db[1]), h.limit)
	switch {
	case errors.Is(err, errDeltaOverLimit):
		h.over = true
	case err != nil:
		h.err = fmt.Errorf("snapshot delta: %w", err)
	}
	return err
}
