package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestDrain stops a real server with SIGTERM while work is in flight: what can finish
// within the shutdown timeout finishes; what cannot is answered, never cut off.
func TestDrain(t *testing.T) {
	t.Parallel()

	t.Run("a turn that ends within the shutdown timeout completes", func(t *testing.T) {
		// A model that answers 6 s after it is asked, well within the default 15 s.
		release := make(chan struct{})
		llm, asked := heldModel(t, release)
		e := newEnv(t)
		serve := startServer(t, e, llm, "sk-drain")
		// The rest of the deployment: a node that fails the turns of nodes it sees stop.
		other := e.node()
		alice := other.as(t, serve.token)
		conv := alice.createConversation(0)
		turn := (&client{t: t, base: "http://" + serve.addr, token: serve.token}).post(conv, "Take your time.")
		select {
		case <-asked:
		case <-time.After(30 * time.Second):
			t.Fatal("the model was not asked")
		}
		time.AfterFunc(6*time.Second, func() { close(release) })
		if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if tj := alice.awaitTurn(conv, turn, 30*time.Second); tj.Status != "completed" {
			t.Fatalf("turn in flight at SIGTERM: %+v, want completed", tj)
		}
		select {
		case <-serve.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not exit after SIGTERM")
		}
		if serve.waitErr != nil {
			t.Fatalf("serve exited with %v after SIGTERM, want 0", serve.waitErr)
		}
	})

	// A run of 10 s with a shutdown timeout of 3 s.
	for _, c := range []struct{ name, code string }{
		{"code that stops when interrupted", "import time\nfor _ in range(100):\n    time.sleep(0.1)"},
		// One time.sleep does not see the interrupt; the engine kills it after its grace
		// of 3 s, past the deadline.
		{"code that ignores the interrupt", "import time\ntime.sleep(10)"},
	} {
		t.Run("a run past the shutdown timeout is answered 503 with Retry-After/"+c.name, func(t *testing.T) {
			runAtShutdown(t, c.code)
		})
	}
}

// runAtShutdown sends SIGTERM to a server with a 3 s shutdown timeout while it runs
// code, and checks the run is answered 503 with Retry-After and not recorded as done.
func runAtShutdown(t *testing.T, code string) {
	t.Helper()
	e := newEnv(t)
	e.copyBase(baseSeed, e.redisPrefix)
	serve := startServer(t, e, "http://127.0.0.1:1/v1", "sk-unused", "SANDCHAT_LLM_PROVIDER=builtin",
		"SANDCHAT_SANDBOX_ENABLED=true", "SANDCHAT_SANDBOX_WARM_POOL=0", "SANDCHAT_SANDBOX_WARM_POOL_MAX=0",
		"SANDCHAT_SANDBOX_WARM_SPARES=0", "SANDCHAT_SHUTDOWN_TIMEOUT=3s")
	alice := &client{t: t, base: "http://" + serve.addr, token: serve.token}
	coder := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(coder.ID)
	path := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv)
	eventually(t, 90*time.Second, "the engine to run code", func() bool {
		return alice.do("POST", path, map[string]any{"code": "1"}, nil) == 200
	})
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"code": code})
		req, _ := http.NewRequest("POST", alice.base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+alice.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		var a answer
		a.resp, a.err = resp, err
		if err == nil {
			a.body, a.err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		got <- a
	}()
	db := m2db(t, e)
	eventually(t, 10*time.Second, "the run recorded as pending", func() bool {
		var n int
		_ = db.QueryRow(context.Background(), `select count(*) from executions where conversation_id = $1 and status = 'pending'`, conv).Scan(&n)
		return n == 1
	})
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer 30 s after SIGTERM")
	}
	if a.err != nil {
		t.Fatalf("run in flight at SIGTERM: %v, want 503 with Retry-After, not a cut connection", a.err)
	}
	if a.resp.StatusCode != 503 || a.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("run in flight at SIGTERM: %d Retry-After=%q %s, want 503 with Retry-After", a.resp.StatusCode, a.resp.Header.Get("Retry-After"), a.body)
	}
	t.Logf("answered %d: %s", a.resp.StatusCode, a.body)
	select {
	case <-serve.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	var status string
	if err := db.QueryRow(context.Background(), `select status from executions where conversation_id = $1 order by id desc limit 1`, conv).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status == "success" || status == "pending" {
		t.Fatalf("run answered 503 recorded %s, want it finished as not having succeeded", status)
	}
}
