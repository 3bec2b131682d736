package proc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// header is a frame's length prefix claiming n bytes.
func header(n uint32) []byte {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], n)
	return h[:]
}

// TestFrameClaimCostsNothing: a process that claims a 700 MiB frame and sends 1 KiB of
// it costs the server what it sent, not what it claimed.
func TestFrameClaimCostsNothing(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(io.MultiReader(bytes.NewReader(header(700<<20)), bytes.NewReader(make([]byte, 1<<10))), 1<<30)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Fatalf("reading 1 KiB of a frame that claims 700 MiB allocated %d MiB", grew>>20)
	}
}

// countingReader counts what is read from it; it never ends.
type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) { c.n += len(p); clear(p); return len(p), nil }

// TestCheckpointReplyBounded: while a checkpoint waits, a frame longer than a delta
// within its MaxBytes (with its index, header and JSON) is refused from its length,
// before any of its body is read; a frame of the size a legitimate reply takes is read.
func TestCheckpointReplyBounded(t *testing.T) {
	const maxFrame = 780 << 20
	limit := replyLimit(CheckpointReq{Op: "checkpoint", MaxBytes: 64 << 20}, maxFrame)
	if limit < 64<<20+(64<<20)/64+12 || limit > 80<<20 {
		t.Fatalf("a checkpoint of 64 MiB may answer with %d bytes", limit)
	}
	if got := replyLimit(RunReq{}, maxFrame); got != maxFrame {
		t.Fatalf("another call's limit %d, want the process's %d", got, maxFrame)
	}
	body := &countingReader{}
	_, err := ReadFrame(io.MultiReader(bytes.NewReader(header(256<<20)), body), limit)
	if err == nil || body.n != 0 {
		t.Fatalf("a forged 256 MiB checkpoint reply: %v, %d bytes of it read", err, body.n)
	}
	// A reply as large as the limit allows is read whole.
	js := []byte(`{"id":1,"ok":true}`)
	frame := append(header(uint32(limit)), header(uint32(len(js)))...)
	frame = append(frame, js...)
	frame = append(frame, make([]byte, limit-4-len(js))...)
	f, err := ReadFrame(bytes.NewReader(frame), limit)
	if err != nil || string(f.JSON) != string(js) || len(f.Bin) != limit-4-len(js) {
		t.Fatalf("a reply at the limit: %v (%d bytes of binary)", err, len(f.Bin))
	}
}
