package sandbox

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// A session process that dies between runs (killed from outside, or by the kernel's
// memory cap) costs nothing but a restore: the next run's code never ran in the dead
// process, so it restores the session and runs.
func TestRunAfterProcessDeath(t *testing.T) {
	e, _, keyOf := setup(t)
	for _, delay := range []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) {
			key := keyOf(fmt.Sprint(delay))
			mustSucceed(t, e, key, "x = 41")
			killAll(t, liveOf(t, e, key).Process())
			time.Sleep(delay)
			res := mustSucceed(t, e, key, "x + 1")
			if got := resultOf(res); got != "42" {
				t.Fatalf("after the process died: result %s, want 42 (restored from %s)", got, res.Session.RestoredFrom)
			}
			if res.Session.RestoredFrom == FromLive {
				t.Fatalf("restored from %s: the dead process was used", res.Session.RestoredFrom)
			}
		})
	}
}

// killAll sends SIGKILL to every task of p as the kernel's OOM killer would, without
// telling the engine.
func killAll(t *testing.T, p *proc.Process) {
	t.Helper()
	for _, pid := range p.Tasks() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Logf("kill %d: %v", pid, err)
		}
	}
}
