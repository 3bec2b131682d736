package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// storedHeap reads what Redis holds for key: the session's version and the version its
// saved heap matches.
func storedHeap(t *testing.T, e *Engine, key string) (version, heap int64) {
	t.Helper()
	st, err := e.st.Load(context.Background(), key, false)
	if err != nil || st == nil {
		t.Fatalf("load %s: %v %v", key, st, err)
	}
	return st.Version, st.HeapVersion
}

// TestCheckpoint: a run is durable by its logged cell when it answers; the heap is saved
// after it, off the answer's path, and before the process goes away; a process lost in
// between costs a replay of the cells since the last heap, never a run.
func TestCheckpoint(t *testing.T) {
	t.Parallel()
	t.Run("the answer comes first, the heap follows", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = 2 * time.Second })
		mustSucceed(t, e, "k", "x = 1")
		if v, h := storedHeap(t, e, "k"); v != 1 || h >= v {
			t.Fatalf("right after the run: version %d, heap of version %d; want the heap still to come", v, h)
		}
		testenv.Eventually(t, 30*time.Second, "the checkpoint stored", func() bool { v, h := storedHeap(t, e, "k"); return h == v })
	})

	t.Run("a process lost before its checkpoint loses nothing", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = time.Hour })
		mustSucceed(t, e, "k", "x = 1")
		mustSucceed(t, e, "k", "x += 1")
		killLive(t, e, "k")
		r := mustSucceed(t, e, "k", "x")
		if resultOf(r) != "2" || r.Session.RestoredFrom != FromReplay {
			t.Fatalf("no heap saved yet: %s from %s, want 2 by replay", resultOf(r), r.Session.RestoredFrom)
		}
		checkpointNow(t, e, "k")
		mustSucceed(t, e, "k", "y = x * 10")
		killLive(t, e, "k")
		r = mustSucceed(t, e, "k", "(x, y)")
		if resultOf(r) != "(2, 20)" || r.Session.RestoredFrom != FromSnapshot || r.Stdout != "" {
			t.Fatalf("heap of version 3 and one cell since: %s from %s stdout %q", resultOf(r), r.Session.RestoredFrom, r.Stdout)
		}
	})

	t.Run("eviction saves the heap first", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = time.Hour })
		mustSucceed(t, e, "k", "x = 7")
		evictLive(t, e, "k")
		if v, h := storedHeap(t, e, "k"); h != v {
			t.Fatalf("after eviction: version %d, heap of version %d", v, h)
		}
		if r := mustSucceed(t, e, "k", "x"); resultOf(r) != "7" || r.Session.RestoredFrom != FromSnapshot {
			t.Fatalf("%s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})

	t.Run("a restored session's state stays as small as a new one's", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = time.Hour })
		mustSucceed(t, e, "k", "x = 1")
		evictLive(t, e, "k")
		first := sessionInfo(t, e, "k").StateBytes
		for i := range 2 {
			mustSucceed(t, e, "k", "x += 1")
			evictLive(t, e, "k")
			// Restoring a heap changes some of it (a few hundred KB that compress to
			// little); a restored session's run once rewrote ~2.3 MB of interpreter
			// caches, all saved at every checkpoint (1.45 MB compressed).
			if got := sessionInfo(t, e, "k").StateBytes; got > first+256<<10 {
				t.Fatalf("after restore %d: state of %d bytes, a new session's was %d", i+1, got, first)
			}
		}
	})

	t.Run("shutdown saves the heap first, another node restores it", func(t *testing.T) {
		e1, b := newEngine(t, func(c *Config) { c.CheckpointDelay = time.Hour })
		mustSucceed(t, e1, "k", "x = 8")
		if err := e1.Close(); err != nil {
			t.Fatal(err)
		}
		if v, h := storedHeap(t, e1, "k"); h != v {
			t.Fatalf("after shutdown: version %d, heap of version %d", v, h)
		}
		e2 := startEngine(t, b.cfg, b.rdb)
		if r := mustSucceed(t, e2, "k", "x"); resultOf(r) != "8" || r.Session.RestoredFrom != FromSnapshot {
			t.Fatalf("%s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})
}

// killLive stops key's process without a checkpoint, as a crash would.
func killLive(t testing.TB, e *Engine, key string) {
	t.Helper()
	liveOf(t, e, key).Process().Close("killed by the test")
}

// liveOf is key's live session; the test fails when there is none.
func liveOf(t testing.TB, e *Engine, key string) *session.Session {
	t.Helper()
	lv := e.sess.get(key)
	if lv == nil {
		t.Fatalf("session %s is not live", key)
	}
	if _, ok := lv.Live(); !ok {
		t.Fatalf("session %s is not live", key)
	}
	return lv
}

func sessionInfo(t testing.TB, e *Engine, key string) SessionInfo {
	t.Helper()
	info, err := e.Session(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
