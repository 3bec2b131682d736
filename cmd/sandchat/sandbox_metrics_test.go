package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestSandboxMetrics does each thing an operator watches the sandbox for, for real,
// and reads its series from /metrics: runs by status and origin with their durations,
// waits for a process, restores after eviction, checkpoints (and one that fails), process
// starts, the kernel's kill of a memory bomb, resets, and the levels read from the
// engine's status at each scrape.
func TestSandboxMetrics(t *testing.T) {
	t.Parallel()
	m := newEnv(t).sandboxNode(func(c *Config, _ *Main) {
		c.Sandbox.Engine.MaxProcesses = 2
		c.Sandbox.Engine.MemoryBytes = 256 << 20
		c.Sandbox.Engine.MaxStateBytes = 4 << 20
		c.RateExecutions = 0
	})
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := func(c *client) int64 {
		a := c.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
		return c.createConversation(a.ID)
	}
	a := alice.createConversation(agent.ID)
	want := func(t *testing.T, v float64, name string, labels ...string) {
		t.Helper()
		m.awaitMetric(t, v, name, labels...)
	}

	t.Run("a new session's run, and the levels", func(t *testing.T) {
		if r := alice.run(a, "x = 41\nx + 1"); r.Status != "success" || r.Session.RestoredFrom != "fresh" {
			t.Fatalf("run %+v", r)
		}
		want(t, 1, "sandchat_sandbox_runs_total", "status", "success", "restored_from", "fresh")
		fams := scrape(t, m)
		for _, s := range []struct {
			name   string
			labels []string
			min    float64
		}{
			{"sandchat_sandbox_run_duration_seconds", []string{"status", "success"}, 1},
			{"sandchat_sandbox_admission_wait_seconds", nil, 1},
			{"sandchat_sandbox_restore_duration_seconds", []string{"from", "fresh"}, 1},
			{"sandchat_sandbox_process_starts_total", nil, 1},
			{"sandchat_sandbox_available", nil, 1},
			{"sandchat_sandbox_live_sessions", nil, 1},
			{"sandchat_sandbox_processes", nil, 1},
			{"sandchat_sandbox_max_processes", nil, 2},
		} {
			if v, ok := series(fams, s.name, s.labels...); !ok || v < s.min {
				t.Errorf("%s%q = %v (present %v), want at least %v", s.name, s.labels, v, ok, s.min)
			}
		}
		for _, name := range []string{"sandchat_sandbox_warm_pool", "sandchat_sandbox_admission_waiting"} {
			if v, ok := series(fams, name); !ok || v != 0 {
				t.Errorf("%s = %v (present %v), want 0 on a node without a pool, nobody waiting", name, v, ok)
			}
		}
	})
	t.Run("a checkpoint", func(t *testing.T) {
		want(t, 1, "sandchat_sandbox_checkpoint_duration_seconds")
		if v := m.metric(t, "sandchat_sandbox_checkpoint_failures_total"); v != 0 {
			t.Fatalf("checkpoint failures: %v", v)
		}
	})
	t.Run("an error and a timeout", func(t *testing.T) {
		if r := alice.run(a, "1 / 0"); r.Status != "error" {
			t.Fatalf("run %+v", r)
		}
		var r runJSON
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", a), map[string]any{"code": "import time\ntime.sleep(60)", "timeout_ms": 1000}, &r)
		if r.Status != "timeout" {
			t.Fatalf("run %+v", r)
		}
		want(t, 1, "sandchat_sandbox_runs_total", "status", "error", "restored_from", "live")
		want(t, 1, "sandchat_sandbox_runs_total", "status", "timeout", "restored_from", "live")
		want(t, 1, "sandchat_sandbox_run_duration_seconds", "status", "timeout")
	})
	t.Run("a restore after eviction", func(t *testing.T) {
		// A run after failed ones saves the heap before it answers. Two processes on the
		// node: the next two sessions evict this one, which comes back from its snapshot.
		if r := alice.run(a, "z = 1"); r.Status != "success" {
			t.Fatalf("run %+v", r)
		}
		for _, c := range []int64{alice.createConversation(agent.ID), alice.createConversation(agent.ID)} {
			if r := alice.run(c, "y = 1"); r.Status != "success" {
				t.Fatalf("run %+v", r)
			}
		}
		if r := alice.run(a, "x"); r.Status != "success" || r.Session.RestoredFrom != "snapshot" || r.Result == nil || *r.Result != "41" {
			t.Fatalf("run after eviction %+v", r)
		}
		want(t, 1, "sandchat_sandbox_runs_total", "status", "success", "restored_from", "snapshot")
		want(t, 1, "sandchat_sandbox_restore_duration_seconds", "from", "snapshot")
	})
	t.Run("runs waiting for a process", func(t *testing.T) {
		// Three users' long runs on a node of two processes: one waits until the others
		// are stopped (their callers hang up).
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		for _, name := range []string{"bob", "carol", "dave"} {
			c, _ := m.user(t, name, false)
			id := conv(c)
			wg.Go(func() {
				body, _ := json.Marshal(map[string]any{"code": "import time\ntime.sleep(120)", "timeout_ms": 120000})
				req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/api/v1/conversations/%d/sandbox/executions", c.base, id), bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+c.token)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		want(t, 1, "sandchat_sandbox_admission_waiting")
	})
	t.Run("a user's reset", func(t *testing.T) {
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", a), nil, nil)
		want(t, 1, "sandchat_sandbox_session_resets_total", "cause", "user")
	})
	t.Run("a checkpoint that fails", func(t *testing.T) {
		// The run's cell is saved, but its heap is past the 4 MiB a session may keep: the
		// checkpoint fails and the session stays durable by its log.
		before := m.metric(t, "sandchat_sandbox_checkpoint_failures_total")
		if r := alice.run(alice.createConversation(agent.ID), "import os\nb = os.urandom(6 << 20)"); r.Status != "success" {
			t.Fatalf("run %+v", r)
		}
		want(t, before+1, "sandchat_sandbox_checkpoint_failures_total")
	})
	t.Run("a memory bomb the kernel kills", func(t *testing.T) {
		if !strings.Contains(m.Engine.Status(context.Background()).Isolation, "cgroup") {
			t.Log("no cgroup per session here: the kernel kills no session for its own cap")
			return
		}
		c := alice.createConversation(agent.ID)
		alice.run(c, "x = 1")
		var r runJSON
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", c), map[string]any{
			"code": "import js\njs.eval('globalThis.hog = []; for (;;) hog.push(new Uint8Array(32 << 20).fill(1))')", "timeout_ms": 120000}, &r)
		if r.Status != "error" {
			t.Fatalf("memory bomb %+v", r)
		}
		want(t, 1, "sandchat_sandbox_oom_kills_total")
		want(t, 1, "sandchat_sandbox_runs_total", "status", "error", "restored_from", "live")
	})
}
