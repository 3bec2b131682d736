package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// hangingRun sends a direct run over a raw connection and returns the connection
// without reading the answer: the test hangs up by closing it.
func (c *client) hangingRun(conv int64, code string) net.Conn {
	c.t.Helper()
	conn, err := net.Dial("tcp", c.base[len("http://"):])
	if err != nil {
		c.t.Fatal(err)
	}
	body := fmt.Sprintf(`{"code":%q}`, code)
	if _, err := fmt.Fprintf(conn, "POST /api/v1/conversations/%d/sandbox/executions HTTP/1.1\r\nHost: sandchat\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", conv, c.token, len(body), body); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// runQuietly is run for a goroutine: it reports a failure in the result, never to the
// test, which may have ended by then.
func (c *client) runQuietly(conv int64, code string) (r runJSON) {
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/conversations/%d/sandbox/executions", c.base, conv), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.Stderr = err.Error()
		return r
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(raw, &r) != nil {
		r.Status, r.Stderr = resp.Status, string(raw)
	}
	return r
}

// TestHungUpRunsLeaveTheQueue: on a node full with long runs, direct runs whose
// clients hung up while they waited for a process leave the queue at once, and never
// run: the next caller finds the node free, not behind them.
func TestHungUpRunsLeaveTheQueue(t *testing.T) {
	t.Parallel()
	m := newEnv(t).sandboxNode(func(c *Config, _ *Main) {
		c.Sandbox.Engine.MaxProcesses = 2
		c.Sandbox.Engine.AdmitTimeout = 2 * time.Minute // longer than the test: only a hang-up ends a wait
	})
	ctx := context.Background()
	// Runs wait for a process, or (past the first of a user, on a node of two) for
	// their user's share of the node.
	waiting := func() int { st := m.Engine.Status(ctx); return st.Waiting + st.UserWaiting }
	sandboxUser := func(name string) (*client, agentJSON) {
		c, _ := m.user(t, name, false)
		return c, c.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	}
	longDone := make(chan runJSON, 2)
	for _, name := range []string{"carol", "dave"} {
		c, agent := sandboxUser(name)
		long := c.createConversation(agent.ID)
		go func() { longDone <- c.runQuietly(long, "import time\ntime.sleep(25)\n'slept'") }()
	}
	eventually(t, 60*time.Second, "two long runs hold the node's two processes", func() bool { return m.Engine.Status(ctx).Processes == 2 })

	alice, agent := sandboxUser("alice")
	var convs []int64
	var conns []net.Conn
	for range 4 {
		conv := alice.createConversation(agent.ID)
		convs = append(convs, conv)
		conns = append(conns, alice.hangingRun(conv, "ran = True"))
	}
	eventually(t, 30*time.Second, "four runs queued", func() bool { return waiting() == 4 })
	for _, c := range conns {
		c.Close()
	}
	eventually(t, 5*time.Second, "the hung-up runs left the queue", func() bool { return waiting() == 0 })
	select {
	case r := <-longDone:
		t.Fatalf("the long run ended before the queue emptied, so this shows nothing: %+v", r)
	default:
	}

	for range 2 {
		if r := <-longDone; r.Status != "success" || r.Result == nil || *r.Result != "'slept'" {
			t.Fatalf("a long run: %+v", r)
		}
	}
	// None of them ran: no session was started or saved for them.
	for _, conv := range convs {
		if _, err := m.Engine.Session(ctx, fmt.Sprintf("conv:%d", conv)); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
			t.Errorf("conversation %d has a Python session after its caller hung up: %v", conv, err)
		}
	}
	if r := alice.run(alice.createConversation(agent.ID), "1 + 1"); r.Status != "success" {
		t.Fatalf("the next run: %+v", r)
	}
}

// TestOneUserCannotTakeEveryProcess: one user's long runs hold at most their share of
// the node's processes; another user's first run finds a process at once and answers
// while they all still run; the first user's run past the share waits for one of theirs,
// then runs.
func TestOneUserCannotTakeEveryProcess(t *testing.T) {
	t.Parallel()
	m := newEnv(t).sandboxNode(func(c *Config, _ *Main) {
		c.Sandbox.Engine.MaxProcesses = 3 // a share of 2 per user
		c.Sandbox.Engine.AdmitTimeout = 2 * time.Minute
	})
	alice, _ := m.user(t, "alice", false)
	bob, _ := m.user(t, "bob", false)
	ctx := context.Background()
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	bobAgent := bob.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})

	aliceDone := make(chan runJSON, 3)
	for range 3 {
		conv := alice.createConversation(agent.ID)
		go func() { aliceDone <- alice.runQuietly(conv, "import time\ntime.sleep(25)\n'slept'") }()
	}
	// All three of alice's runs are in: running, or waiting for a process or her share.
	eventually(t, 60*time.Second, "alice's three runs admitted or waiting", func() bool {
		st := m.Engine.Status(ctx)
		return st.Processes+st.Waiting+st.UserWaiting == 3 && st.Processes >= 2
	})

	r := bob.run(bob.createConversation(bobAgent.ID), "1 + 1")
	if r.Status != "success" || r.Result == nil || *r.Result != "2" {
		t.Fatalf("bob's first run: %+v", r)
	}
	if n := len(aliceDone); n != 0 {
		t.Fatalf("bob's first run answered only after %d of alice's long runs ended", n)
	}
	for range 3 {
		if r := <-aliceDone; r.Status != "success" || r.Result == nil || *r.Result != "'slept'" {
			t.Fatalf("alice's run: %+v", r)
		}
	}
}
