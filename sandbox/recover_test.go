package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSessionAlwaysRecovers: whatever a session's code did to its interpreter, the
// session comes back. A state that cannot run when restored (its runner broken by the
// code, a change to the Worker's JavaScript that its log replays, a restore that fails)
// is reset, and the run says so: which version was lost, and that the session starts
// over. No answer reads "[object Object]" or names the server's files.
func TestSessionAlwaysRecovers(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = time.Hour })
	ctx := context.Background()
	// answer runs code and holds every answer to the rules; reset says the run reset
	// the session, told so in its stderr.
	answer := func(t *testing.T, k, code string) (r Result, reset bool) {
		t.Helper()
		r, err := e.Execute(ctx, k, Request{Code: code, Timeout: 15 * time.Second})
		if err != nil {
			t.Fatalf("%.60q: %v", code, err)
		}
		said := r.Stderr + r.Stdout[:min(len(r.Stdout), 4096)]
		if r.Error != nil {
			said += r.Error.Message
		}
		for _, bad := range []string{"[object Object]", "file://", e.cfg.RuntimeDir, "node_modules"} {
			if strings.Contains(said, bad) {
				t.Fatalf("%.60q: the answer says %q: %.600s", code, bad, said)
			}
		}
		reset = r.Session.ResetFrom > 0
		if reset && !strings.Contains(said, "the session was reset") {
			t.Fatalf("%.60q: reset from version %d without saying so: %.600s", code, r.Session.ResetFrom, said)
		}
		t.Logf("%.50q: %s %s from=%s v=%d reset_from=%d", code, r.Status, resultOf(r), r.Session.RestoredFrom, r.Session.Version, r.Session.ResetFrom)
		return r, reset
	}
	// recovered: the next plain run has the session's state, or says it was reset; the
	// one after it runs.
	recovered := func(t *testing.T, k string, resetBefore bool) {
		t.Helper()
		r, reset := answer(t, k, "x")
		switch {
		case r.Status == StatusSuccess && resultOf(r) == "41":
		case reset || resetBefore:
			if r.Status != StatusSuccess && (r.Error == nil || r.Error.Type != "NameError") {
				t.Fatalf("after the reset: %s %+v", r.Status, r.Error)
			}
		default:
			t.Fatalf("the session did not recover: %s %s %+v stderr %.300q", r.Status, resultOf(r), r.Error, r.Stderr)
		}
		if r := mustSucceed(t, e, k, "'alive'"); resultOf(r) != "'alive'" {
			t.Fatalf("then: %s", resultOf(r))
		}
	}

	t.Run("a saved state that breaks the runner", func(t *testing.T) {
		mustSucceed(t, e, "runner", "x = 41")
		mustSucceed(t, e, "runner", "import _sandchat\n_sandchat.run = None")
		checkpointNow(t, e, "runner")
		recovered(t, "runner", false)
	})

	t.Run("a change to the Worker that the log replays", func(t *testing.T) {
		mustSucceed(t, e, "replayed", "x = 41")
		mustSucceed(t, e, "replayed", "import js\njs.eval(\"Date.now = () => { throw new Error('tampered') }\")")
		recovered(t, "replayed", false)
	})

	t.Run("a saved state that cannot be restored", func(t *testing.T) {
		mustSucceed(t, e, "restore", "x = 41")
		mustSucceed(t, e, "restore", "import _sandchat\n_sandchat.forget_listings = None")
		checkpointNow(t, e, "restore")
		mustSucceed(t, e, "restore", "y = 1") // replayed after the heap: /data is mounted first
		killLive(t, e, "restore")
		recovered(t, "restore", false)
	})

	t.Run("the hostile sequence", func(t *testing.T) {
		const k = "hostile"
		mustSucceed(t, e, k, "x = 41")
		resetBefore := false
		for _, step := range []string{
			"import js\njs.eval(\"postMessage({op: 'failed', error: {nested: 'object'}})\")\njs.eval(\"postMessage({op: 'done', status: 'success'})\")",
			"import js\njs.eval(\"Atomics.wait = () => 'timed-out'; Atomics.notify = () => 0; Atomics.store = () => 0; Atomics.load = () => 0\")",
			"import js\njs.eval(\"WebAssembly.instantiate = null; WebAssembly.Module = null; WebAssembly.Instance = null; WebAssembly.Memory.prototype.grow = () => 0\")",
			"import pyodide_js\npyodide_js.setInterruptBuffer(None)",
			"print('x' * (16 << 20))",
			"import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)",
			"import js\njs.eval(\"Date.now = () => { throw new Error('tampered') }\")",
			"b = bytearray(1536 * 2**20)",
			"import _sandchat\n_sandchat.run = None",
		} {
			if _, reset := answer(t, k, step); reset {
				resetBefore = true
			}
			if lv := e.sess.get(k); lv != nil {
				if err := lv.Checkpoint(ctx); err != nil {
					t.Logf("checkpoint: %v", err)
				}
			}
		}
		recovered(t, k, resetBefore)
	})
}

// TestReplayedBreakageResets: a session whose log replays a cell that breaks the way to
// a run's code (mounting /data) comes back: reset, and told so once, where it used to
// pass the engine's check (a cell run without /data) and fail every run with uploads
// after it. A realm whose Object.prototype was given an enumerable property (which
// Emscripten's rmdir reads as an entry: ENOTEMPTY, errno 55) keeps mounting /data, and
// the session its state.
func TestReplayedBreakageResets(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay, c.CheckpointDelay = true, time.Hour })
	ctx := context.Background()
	upload := func(v string) []File {
		return []File{{Name: "in/table.csv", Data: []byte(v)}, {Name: "top.csv", Data: []byte("t")}}
	}
	runWith := func(t *testing.T, k, code string, data []File) Result {
		t.Helper()
		r, err := e.Execute(ctx, k, Request{Code: code, Data: files(data...)})
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		t.Logf("%.40q: %s %s from=%s reset_from=%d stderr %.200q", code, r.Status, resultOf(r), r.Session.RestoredFrom, r.Session.ResetFrom, r.Stderr)
		return r
	}
	t.Run("the file system's writeFile broken", func(t *testing.T) {
		const k = "writefile"
		runWith(t, k, "x = 41", upload("1"))
		runWith(t, k, "import pyodide_js\npyodide_js.FS.writeFile = None", upload("1"))
		resets := 0
		for i, v := range []string{"2", "3", "4"} {
			r := runWith(t, k, "open('/data/in/table.csv').read()", upload(v))
			if r.Session.ResetFrom > 0 {
				resets++
				if strings.Count(r.Stderr, "the session was reset") != 1 {
					t.Fatalf("run %d: reset without saying so once: %q", i, r.Stderr)
				}
			}
			if r.Status != StatusSuccess || resultOf(r) != "'"+v+"'" {
				t.Fatalf("run %d: %s %s %+v", i, r.Status, resultOf(r), r.Error)
			}
		}
		if resets != 1 {
			t.Fatalf("%d resets, want 1", resets)
		}
	})
	t.Run("Object.prototype polluted", func(t *testing.T) {
		const k = "polluted"
		runWith(t, k, "x = 41", upload("1"))
		runWith(t, k, "import js\njs.eval('Object.prototype.polluted = 1')", upload("1"))
		for i, v := range []string{"2", "3", "4"} {
			r := runWith(t, k, "x, open('/data/in/table.csv').read()", upload(v))
			if r.Status != StatusSuccess || resultOf(r) != "(41, '"+v+"')" || r.Session.ResetFrom > 0 {
				t.Fatalf("run %d: %s %s %+v stderr %q", i, r.Status, resultOf(r), r.Error, r.Stderr)
			}
		}
	})
}

// TestRefusedCheckpointSaysWhy: a run that follows a failed one saves its heap before it
// answers; when that heap is over the session's state limit, the run's stderr says so
// (not "Internal error.").
func TestRefusedCheckpointSaysWhy(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.MaxStateBytes, c.CheckpointDelay = 8<<20, time.Hour })
	mustSucceed(t, e, "k", "x = 1")
	if r := run(t, e, "k", "import os\nbig = os.urandom(32 << 20)\n1 / 0"); r.Status != StatusError {
		t.Fatalf("the failed run: %s", r.Status)
	}
	r := mustSucceed(t, e, "k", "y = 2")
	if !strings.Contains(r.Stderr, "could not be saved yet") || !strings.Contains(r.Stderr, "state limit") || strings.Contains(r.Stderr, "Internal error") {
		t.Fatalf("stderr %q", r.Stderr)
	}
}
