package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// heard is what an Observer was told.
type heard struct {
	runs        []string // status/restored_from
	admissions  int
	restores    []string
	checkpoints []error
	started     int
	oom         int
	resets      []string
}

func (h heard) String() string {
	return fmt.Sprintf("runs %v, admissions %d, restores %v, checkpoints %v, started %d, oom %d, resets %v",
		h.runs, h.admissions, h.restores, h.checkpoints, h.started, h.oom, h.resets)
}

// recorder is an Observer that keeps every call.
type recorder struct {
	mu sync.Mutex // guards h
	h  heard
}

func (r *recorder) RunDone(status, from string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if took <= 0 {
		status += "(no duration)"
	}
	r.h.runs = append(r.h.runs, status+"/"+from)
}

func (r *recorder) AdmissionWaited(time.Duration) { r.mu.Lock(); r.h.admissions++; r.mu.Unlock() }

func (r *recorder) Restored(from string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if took <= 0 {
		from += "(no duration)"
	}
	r.h.restores = append(r.h.restores, from)
}

func (r *recorder) Checkpointed(_ time.Duration, err error) {
	r.mu.Lock()
	r.h.checkpoints = append(r.h.checkpoints, err)
	r.mu.Unlock()
}

func (r *recorder) ProcessStarted() { r.mu.Lock(); r.h.started++; r.mu.Unlock() }
func (r *recorder) OOMKilled()      { r.mu.Lock(); r.h.oom++; r.mu.Unlock() }
func (r *recorder) SessionReset(cause string) {
	r.mu.Lock()
	r.h.resets = append(r.h.resets, cause)
	r.mu.Unlock()
}

func (r *recorder) now() heard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h
}

// since runs fn and returns what the recorder heard meanwhile.
func (r *recorder) since(fn func()) heard {
	a := r.now()
	fn()
	b := r.now()
	return heard{runs: b.runs[len(a.runs):], admissions: b.admissions - a.admissions, restores: b.restores[len(a.restores):],
		checkpoints: b.checkpoints[len(a.checkpoints):], started: b.started - a.started, oom: b.oom - a.oom, resets: b.resets[len(a.resets):]}
}

// TestObserverHearsEachThing: each thing the engine does reaches its Observer once, as
// it happened: runs with their status and where their interpreter came from, the waits
// for a process, restores, checkpoints, process starts, the kernel's kills and resets.
func TestObserverHearsEachThing(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e, _ := newEngineOn(t, func(c *Config) { c.CheckpointDelay = time.Hour; c.MemoryBytes = 256 << 20 }, nil, WithObserver(rec))
	ctx := context.Background()
	const k = "observed"
	exec := func(code string, timeout time.Duration) {
		t.Helper()
		if _, err := e.Execute(ctx, k, Request{Code: code, Timeout: timeout}); err != nil {
			t.Fatalf("%q: %v", code, err)
		}
	}
	expect := func(t *testing.T, got heard, ok bool) {
		t.Helper()
		if !ok {
			t.Fatalf("heard %s", got)
		}
		t.Logf("heard %s", got)
	}
	t.Run("a new session's run", func(t *testing.T) {
		got := rec.since(func() { exec("x = 1", 0) })
		expect(t, got, strings.Join(got.runs, " ") == "success/fresh" && got.admissions == 1 &&
			strings.Join(got.restores, " ") == "fresh" && got.started >= 1)
	})
	t.Run("an error and a timeout", func(t *testing.T) {
		got := rec.since(func() {
			exec("1 / 0", 0)
			exec("import time\ntime.sleep(60)", time.Second)
		})
		expect(t, got, strings.Join(got.runs, " ") == "error/live timeout/live" && got.admissions == 0 && len(got.restores) == 0)
	})
	t.Run("a refused run", func(t *testing.T) {
		got := rec.since(func() {
			if _, err := e.Execute(ctx, k, Request{Code: strings.Repeat("#", e.cfg.MaxCode+1)}); err == nil {
				t.Fatal("code over the limit ran")
			}
		})
		expect(t, got, strings.Join(got.runs, " ") == "refused/")
	})
	t.Run("a checkpoint, then a restore after eviction", func(t *testing.T) {
		// A run that follows failed ones saves its heap before it answers.
		got := rec.since(func() { exec("y = 2", 0) })
		expect(t, got, len(got.checkpoints) == 1 && got.checkpoints[0] == nil)
		got = rec.since(func() {
			exec("z = 3", 0)
			checkpointNow(t, e, k)
		})
		expect(t, got, len(got.checkpoints) == 1 && got.checkpoints[0] == nil)
		got = rec.since(func() {
			evictLive(t, e, k)
			exec("x", 0)
		})
		expect(t, got, strings.Join(got.runs, " ") == "success/snapshot" && got.admissions == 1 &&
			strings.Join(got.restores, " ") == "snapshot")
	})
	t.Run("a user's reset", func(t *testing.T) {
		got := rec.since(func() {
			if err := e.Reset(ctx, k); err != nil {
				t.Fatal(err)
			}
		})
		expect(t, got, strings.Join(got.resets, " ") == ResetByUser)
	})
	t.Run("a saved state that cannot run is reset", func(t *testing.T) {
		const b = "broken"
		got := rec.since(func() {
			mustSucceed(t, e, b, "x = 41")
			mustSucceed(t, e, b, "import _sandchat\n_sandchat.run = None")
			checkpointNow(t, e, b)
			if _, err := e.Execute(ctx, b, Request{Code: "x"}); err != nil {
				t.Fatal(err)
			}
		})
		expect(t, got, strings.Join(got.resets, " ") == ResetBroken)
	})
	t.Run("a process the kernel kills for its memory", func(t *testing.T) {
		if e.procs.launch.Jail.Cgroups == nil {
			// Without a cgroup per session, the kernel's cap is not the session's alone.
			t.Log("no cgroup per session here: the kernel kills no session for its own cap")
			return
		}
		const b = "bomb"
		mustSucceed(t, e, b, "x = 1")
		got := rec.since(func() {
			r, err := e.Execute(ctx, b, Request{Code: "import js\njs.eval('globalThis.hog = []; for (;;) hog.push(new Uint8Array(32 << 20).fill(1))')",
				Timeout: 2 * time.Minute})
			if err != nil || r.Status != StatusError {
				t.Fatalf("memory bomb: %v %s %+v", err, r.Status, r.Error)
			}
			testenv.Eventually(t, time.Minute, "the kill heard", func() bool { return rec.now().oom > 0 })
		})
		expect(t, got, got.oom == 1 && strings.Join(got.runs, " ") == "error/live")
	})
}
