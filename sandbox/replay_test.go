package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReplayDeadlines: each replayed cell gets the time limit it first ran under. A cell
// that runs on past it is interrupted and the restore says which; one that ignores the
// interrupt too ends the restore at once, not after the whole restore timeout: trying
// again would meet the same cell, so the session is reset and the run says which cell.
func TestReplayDeadlines(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay = true })
	ctx := context.Background()
	// A replay mounts the run's uploads before its cells: the mark, which was not there
	// when the cell first ran, is then, and the cell loops.
	loops := func(loop string) string {
		return "import os\nif os.path.exists('/data/mark'):\n" + loop
	}
	mark := []File{{Name: "mark", Data: []byte("1")}}
	exec := func(key, code string, timeout time.Duration) {
		t.Helper()
		r, err := e.Execute(ctx, key, Request{Code: code, Timeout: timeout})
		if err != nil || r.Status != StatusSuccess {
			t.Fatalf("%q: %v %s %+v", code, err, r.Status, r.Error)
		}
	}

	t.Run("interrupted at its limit", func(t *testing.T) {
		exec("a", "x = 1", 0)
		exec("a", loops("    while True: pass"), 2*time.Second)
		evictLive(t, e, "a")
		r, err := e.Execute(ctx, "a", Request{Code: "x", Data: files(mark...)})
		if err != nil || resultOf(r) != "1" || !strings.Contains(r.Stderr, "replay of cell 2 was stopped at its time limit (2 s)") {
			t.Fatalf("result %s stderr %q", resultOf(r), r.Stderr)
		}
	})

	t.Run("ignoring the interrupt ends the restore, naming the cell", func(t *testing.T) {
		exec("b", "x = 1", 0)
		exec("b", loops("    while True:\n        try:\n            while True: pass\n        except KeyboardInterrupt:\n            pass"), time.Second)
		evictLive(t, e, "b")
		r, err := e.Execute(ctx, "b", Request{Code: "x = 2\nx", Data: files(mark...)})
		if err != nil || resultOf(r) != "2" || r.Session.ResetFrom != 2 || !strings.Contains(r.Stderr, "replay of cell 2 did not stop") ||
			strings.Count(r.Stderr, "the session was reset") != 1 {
			t.Fatalf("restore: %v, %s reset from %d, stderr %q", err, resultOf(r), r.Session.ResetFrom, r.Stderr)
		}
		mustSucceed(t, e, "b", "x = 3")
	})
}
