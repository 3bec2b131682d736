package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// TestReplayDeadlines: each replayed cell gets the time limit it first ran under. A cell
// that runs on past it is interrupted and the restore says which; one that ignores the
// interrupt too ends the restore with a clear refusal naming the cell, not a wait for
// the whole restore timeout.
func TestReplayDeadlines(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay = true })
	ctx := context.Background()
	// On replay the saved files come back first, so the mark exists and the cell loops.
	loops := func(mark, loop string) string {
		return "import os\nif os.path.exists('" + mark + "'):\n" + loop + "\nopen('" + mark + "', 'w').write('1')"
	}
	exec := func(key, code string, timeout time.Duration) {
		t.Helper()
		r, err := e.Execute(ctx, key, Request{Code: code, Timeout: timeout})
		if err != nil || r.Status != StatusSuccess {
			t.Fatalf("%q: %v %s %+v", code, err, r.Status, r.Error)
		}
	}

	t.Run("interrupted at its limit", func(t *testing.T) {
		exec("a", "x = 1", 0)
		exec("a", loops("mark", "    while True: pass"), 2*time.Second)
		evictLive(t, e, "a")
		r := mustSucceed(t, e, "a", "x")
		if resultOf(r) != "1" || !strings.Contains(r.Stderr, "replay of cell 2 was stopped at its time limit (2 s)") {
			t.Fatalf("result %s stderr %q", resultOf(r), r.Stderr)
		}
	})

	t.Run("ignoring the interrupt ends the restore, naming the cell", func(t *testing.T) {
		exec("b", "x = 1", 0)
		exec("b", loops("mark", "    while True:\n        try:\n            while True: pass\n        except KeyboardInterrupt:\n            pass"), time.Second)
		evictLive(t, e, "b")
		_, err := e.Execute(ctx, "b", Request{Code: "x"})
		if sandchat.ErrorCode(err) != sandchat.ECONFLICT || !strings.Contains(sandchat.ErrorMessage(err), "replay of cell 2 did not stop") {
			t.Fatalf("restore: %v", err)
		}
		// The way out the refusal names works.
		if err := e.Reset(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, e, "b", "x = 2")
	})
}
