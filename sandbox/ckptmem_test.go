package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// forgeCheckpoint has the session's Worker answer the engine's next checkpoint with a
// well-formed delta of mib MiB of zeros, past the base heap, as code that hooks the
// Worker's message handler can.
func forgeCheckpoint(mib int) string {
	return `import js
js.eval("""{
const real = self.onmessage;
self.onmessage = (e) => {
  if (e.data?.op !== "checkpoint") return real(e);
  const count = Math.floor(((` + itoa(mib) + ` << 20) - 12) / 260), start = 131072;
  const d = new Uint8Array(12 + count * 260), v = new DataView(d.buffer);
  v.setUint32(0, (start + count) * 256, true);
  v.setUint32(4, count, true);
  v.setUint32(8, 256, true);
  for (let k = 0; k < count; k++) v.setUint32(12 + 4 * k, start + k, true);
  postMessage({op: "checkpointed", header: new Uint8Array(64), delta: d});
};
}""")`
}

func itoa(n int) string { return strconv.Itoa(n) }

// heapPeak samples the Go heap while fn runs and returns how far it rose above what it
// held before (after a collection).
func heapPeak(fn func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base, peak := m.HeapAlloc, m.HeapAlloc
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return peak - base
}

// TestForgedCheckpointCostsAConstant: code that answers its session's checkpoint with a
// 256 MiB delta (zeros, within a state limit that allows it) costs the server a bounded
// amount of memory, whatever size it claims: the delta is XOR-ed and compressed as it
// arrives, never held whole; and so is the restore that reads it back.
//
// Not parallel: it reads the Go heap of the whole test binary.
func TestForgedCheckpointCostsAConstant(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) {
		c.MaxStateBytes, c.CheckpointDelay = 512<<20, time.Hour
	})
	const k = "forged"
	mustSucceed(t, e, k, "x = 1")
	mustSucceed(t, e, k, forgeCheckpoint(256))
	saved := heapPeak(func() {
		if err := e.ckpt.live(context.Background(), liveOf(t, e, k)); err != nil {
			t.Logf("checkpoint: %v", err)
		}
	})
	v, h := storedHeap(t, e, k)
	t.Logf("the server's heap rose by %d MiB for a forged 256 MiB checkpoint (version %d, heap of %d)", saved>>20, v, h)
	killLive(t, e, k)
	var r Result
	restored := heapPeak(func() { r = run(t, e, k, "x") })
	t.Logf("and by %d MiB to restore it: %s %s from %s", restored>>20, r.Status, resultOf(r), r.Session.RestoredFrom)
	const bound = 48 << 20
	if saved > bound || restored > bound {
		t.Fatalf("a forged 256 MiB delta cost the server %d MiB to save and %d MiB to restore; the bound is %d MiB", saved>>20, restored>>20, bound>>20)
	}
}

// BenchmarkHeapDelta compares a checkpoint's heap path as the server runs it (XOR-ed and
// compressed as it streams in; decompressed and XOR-ed as it streams out) with the same
// work on the delta held whole, for a delta of 8 MiB: half the blocks differ from the
// base by a few words (as a run's writes do), half are past the base heap.
func BenchmarkHeapDelta(b *testing.B) {
	const size, ho = 256, 48
	base := make([]byte, ho+16<<20)
	binary.LittleEndian.PutUint32(base[4:], ho)
	r := rand.New(rand.NewPCG(3, 4))
	for i := ho; i < len(base); i += 8 {
		if r.IntN(3) == 0 {
			binary.LittleEndian.PutUint64(base[i:], r.Uint64()&0x00ff00ff00ff00ff)
		}
	}
	count := (8 << 20) / size
	delta := make([]byte, 12+count*(4+size))
	binary.LittleEndian.PutUint32(delta[4:], uint32(count))
	binary.LittleEndian.PutUint32(delta[8:], size)
	blocks := delta[12+4*count:]
	for k := range count {
		i := uint32(2 * k)
		if k >= count/2 {
			i = uint32((16<<20)/size + k)
		}
		binary.LittleEndian.PutUint32(delta[12+4*k:], i)
		blk := blocks[k*size : (k+1)*size]
		if int(i)*size < len(base)-ho {
			copy(blk, base[ho+int(i)*size:])
		}
		binary.LittleEndian.PutUint32(blk[r.IntN(size/4)*4:], r.Uint32())
	}
	b.Run("held whole", func(b *testing.B) {
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
		for b.Loop() {
			z := enc.EncodeAll(xorBase(base, delta), nil)
			raw, err := dec.DecodeAll(z, nil)
			if err != nil {
				b.Fatal(err)
			}
			_ = xorBase(base, raw)
		}
	})
	b.Run("streamed", func(b *testing.B) {
		for b.Loop() {
			z, err := compressDelta(base, bytes.NewReader(delta), int64(len(delta)), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			var o proc.Blobs
			if _, err := deltaBlob(&o, base, z); err != nil {
				b.Fatal(err)
			}
			if err := proc.WriteFrame(io.Discard, struct{}{}, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
