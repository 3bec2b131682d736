package sandbox

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
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
		if err := liveOf(t, e, k).Checkpoint(context.Background()); err != nil {
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
