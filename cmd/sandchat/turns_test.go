package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type messageJSON struct {
	ID         int64
	Role       string
	AgentPath  []string `json:"agent_path"`
	Content    string
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// say posts a message and waits for its turn to end; it returns the turn's final status
// and the assistant's last answer.
func (c *client) say(conv int64, content string) (status, answer string) {
	c.t.Helper()
	turn := c.post(conv, content)
	status = c.finishTurn(conv, turn).Status
	var msgs []messageJSON
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" && len(msgs[i].AgentPath) == 1 {
			return status, msgs[i].Content
		}
	}
	return status, ""
}

func (c *client) post(conv int64, content string) int64 {
	c.t.Helper()
	var started struct {
		TurnID  int64 `json:"turn_id"`
		Message messageJSON
	}
	c.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": content}, &started)
	if started.TurnID == 0 || started.Message.Role != "user" || started.Message.Content != content {
		c.t.Fatalf("started %+v", started)
	}
	return started.TurnID
}

// finishTurn waits for the turn to end, as long as a sandbox turn may take.
func (c *client) finishTurn(conv, turn int64) turnJSON {
	return c.awaitTurn(conv, turn, 90*time.Second)
}

// awaitTurn polls the turn until it is no longer running and returns it; a turn still
// running after within fails the test.
func (c *client) awaitTurn(conv, turn int64, within time.Duration) turnJSON {
	c.t.Helper()
	var tj turnJSON
	eventually(c.t, within, fmt.Sprintf("turn %d to end", turn), func() bool {
		c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/turns/%d", conv, turn), nil, &tj)
		return tj.Status != "running"
	})
	if tj.Error != "" {
		c.t.Logf("turn %d ended %s: %s", turn, tj.Status, tj.Error)
	}
	return tj
}

func py(code string) string { return "```python\n" + code + "\n```" }

// coder starts a node with the real sandbox and gives alice a conversation with an
// agent that has the sandbox on.
func (e *testEnv) coder() (*Main, *client, int64) {
	m := e.sandboxNode()
	alice, _ := m.user(e.t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	return m, alice, alice.createConversation(agent.ID)
}

// TestTurnsBuiltin: the offline model runs Python across turns with state carried over,
// every event reaches a subscriber in seq order, and switching the sandbox off between
// turns takes the tool away.
func TestTurnsBuiltin(t *testing.T) {
	t.Parallel()
	_, alice, conv := newEnv(t).coder()
	ws := alice.socket()
	ws.subscribe(conv, nil)

	steps := []struct{ code, want string }{
		{"import math\ndef area(r):\n    return round(math.pi * r * r, 2)\ncounter = (i for i in range(10))", "(no output)"},
		{"print(next(counter), next(counter))\narea(2)", "0 1\n12.57"},
		{"print(next(counter))\nsquares = [n * n for n in range(4)]\nsquares", "2\n[0, 1, 4, 9]"},
	}
	t.Run("agent preload", func(t *testing.T) {
		// fractions is not imported by a fresh interpreter: only the agent's preload brings it.
		probe := "Please run this:\n" + py("import sys\n'fractions' in sys.modules")
		for _, tc := range []struct {
			preload []string
			want    string
		}{{nil, "False"}, {[]string{"fractions"}, "True"}} {
			a := alice.createAgent(map[string]any{"name": fmt.Sprintf("Preloaded %v", tc.preload), "preload": tc.preload,
				"internal_tools": map[string]bool{"pyodide_sandbox": true}})
			if status, answer := alice.say(alice.createConversation(a.ID), probe); status != "completed" || !strings.Contains(answer, tc.want) {
				t.Fatalf("preload %v: %s %q, want %s", tc.preload, status, answer, tc.want)
			}
		}
	})
	for i, s := range steps {
		t.Run(fmt.Sprintf("turn %d", i+1), func(t *testing.T) {
			status, answer := alice.say(conv, "Please run this:\n"+py(s.code))
			if status != "completed" || !strings.Contains(answer, s.want) {
				t.Fatalf("status %s, answer %q, want it to contain %q", status, answer, s.want)
			}
		})
	}
	t.Run("the conversation is named after its first message", func(t *testing.T) {
		var c struct {
			ID    int64
			Title string
		}
		alice.must(201, "POST", "/api/v1/conversations", map[string]any{}, &c)
		alice.say(c.ID, "Please run this:\n"+py("1"))
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d", c.ID), nil, &c)
		if c.Title != "Please run this:" {
			t.Fatalf("title %q", c.Title)
		}
	})

	t.Run("events arrive in order with agent paths", func(t *testing.T) {
		var types []string
		var last int64
		completed := 0
		for completed < len(steps) {
			f := ws.expect2()
			if f.Seq != last+1 {
				t.Fatalf("seq %d after %d", f.Seq, last)
			}
			last = f.Seq
			types = append(types, f.Type)
			if f.Type == "tool.completed" {
				// result is the trailing expression's repr, as in the REST result.
				var d struct{ Result *string }
				if err := json.Unmarshal(f.Data, &d); err != nil {
					t.Fatalf("tool.completed %s: %v", f.Data, err)
				}
			}
			if f.Type == "turn.completed" {
				completed++
			}
		}
		joined := strings.Join(types, " ")
		for _, want := range []string{"turn.started", "message.created", "tool.started", "tool.completed", "message.delta", "message.completed", "turn.completed"} {
			if !strings.Contains(joined, want) {
				t.Fatalf("no %s in %s", want, joined)
			}
		}
		if strings.Index(joined, "tool.started") > strings.Index(joined, "tool.completed") {
			t.Fatalf("tool events out of order: %s", joined)
		}
	})

	t.Run("messages are structured rows", func(t *testing.T) {
		var msgs []messageJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
		var calls, results int
		for _, msg := range msgs {
			if msg.Role == "assistant" && len(msg.ToolCalls) > 0 && string(msg.ToolCalls) != "null" {
				calls++
			}
			if msg.Role == "tool" && msg.ToolCallID != "" {
				results++
			}
		}
		if calls != 3 || results != 3 || len(msgs) != 12 {
			t.Fatalf("%d messages, %d with tool calls, %d tool results", len(msgs), calls, results)
		}
	})

	t.Run("switching the sandbox off takes the tool away", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		status, answer := alice.say(conv, py("squares"))
		if status != "completed" || !strings.Contains(answer, "sandbox is off") {
			t.Fatalf("%s %q", status, answer)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": nil}, nil)
		if _, answer := alice.say(conv, py("squares[-1]")); !strings.Contains(answer, "9") {
			t.Fatalf("state lost while off: %q", answer)
		}
	})

	t.Run("plain text gets a short reply", func(t *testing.T) {
		if status, answer := alice.say(conv, "hello there"); status != "completed" || answer == "" {
			t.Fatalf("%s %q", status, answer)
		}
	})
	t.Run("bad messages", func(t *testing.T) {
		alice.must(400, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "  "}, nil)
		alice.must(413, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": strings.Repeat("x", 300<<10)}, nil)
		alice.must(400, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"text": "hi"}, nil)
	})
}

// expect2 reads the next conversation event, skipping frames that are not.
func (s *socket) expect2() frame {
	s.t.Helper()
	for {
		f, err := s.next(30 * time.Second)
		if err != nil {
			s.t.Fatalf("reading events: %v", err)
		}
		if f.Seq != 0 {
			return f
		}
	}
}

// TestResumeMidTurn drops a socket in the middle of a turn; reconnecting with since
// gives every event exactly once, in order.
func TestResumeMidTurn(t *testing.T) {
	t.Parallel()
	_, alice, conv := newEnv(t).coder()

	first := alice.socket()
	first.subscribe(conv, nil)
	turn := alice.post(conv, py("import time\nfor i in range(6):\n    print('line', i, flush=True)\n    time.sleep(0.25)"))
	seen := map[int64]string{}
	var last int64
	for {
		f := first.expect2()
		seen[f.Seq], last = f.Type, f.Seq
		if f.Type == "tool.output" {
			break
		}
	}
	first.conn.Close() // the tab goes away mid-run
	if status := alice.finishTurn(conv, turn).Status; status != "completed" {
		t.Fatalf("turn %s", status)
	}

	second := alice.socket()
	if f := second.subscribe(conv, &last); string(f.Data) != `{"recovered":true}` {
		t.Fatalf("subscribed %s", f.Data)
	}
	var output strings.Builder
	for {
		f := second.expect2()
		if _, dup := seen[f.Seq]; dup {
			t.Fatalf("seq %d delivered twice", f.Seq)
		}
		if f.Seq != last+1 {
			t.Fatalf("seq %d after %d", f.Seq, last)
		}
		seen[f.Seq], last = f.Type, f.Seq
		if f.Type == "tool.output" {
			var d struct{ Text string }
			_ = json.Unmarshal(f.Data, &d)
			output.WriteString(d.Text)
		}
		if f.Type == "turn.completed" {
			break
		}
	}
	second.quiet("turn.completed", 300*time.Millisecond)
	if !strings.Contains(output.String(), "line 5") {
		t.Fatalf("missed output after the drop: %q", output.String())
	}
}

// TestSwarm: children share the conversation and its Python session, each with its own
// internal-tool settings.
func TestSwarm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	alpha := alice.createAgent(map[string]any{"name": "alpha", "description": "sets things up", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	beta := alice.createAgent(map[string]any{"name": "beta", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	gamma := alice.createAgent(map[string]any{"name": "gamma", "internal_tools": map[string]bool{"pyodide_sandbox": false}})
	lead := alice.createAgent(map[string]any{"name": "lead", "children": []int64{alpha.ID, beta.ID, gamma.ID},
		"internal_tools": map[string]bool{"pyodide_sandbox": false, "swarm_mode": true}})
	conv := alice.createConversation(lead.ID)
	ws := alice.socket()
	ws.subscribe(conv, nil)

	t.Run("alpha defines a variable", func(t *testing.T) {
		status, answer := alice.say(conv, "@alpha "+py("shared = 6 * 7\nprint('set')"))
		if status != "completed" || !strings.Contains(answer, "@alpha") || !strings.Contains(answer, "set") {
			t.Fatalf("%s %q", status, answer)
		}
	})
	t.Run("beta sees it", func(t *testing.T) {
		if _, answer := alice.say(conv, "@beta "+py("shared + 0")); !strings.Contains(answer, "42") {
			t.Fatalf("%q", answer)
		}
	})
	t.Run("gamma has the sandbox off", func(t *testing.T) {
		_, answer := alice.say(conv, "@gamma "+py("shared"))
		if !strings.Contains(answer, "sandbox is off") || !strings.Contains(answer, "gamma's own setting") || strings.Contains(answer, "42") {
			t.Fatalf("%q", answer)
		}
	})
	t.Run("the lead itself cannot run code", func(t *testing.T) {
		if _, answer := alice.say(conv, py("shared")); !strings.Contains(answer, "sandbox is off") {
			t.Fatalf("%q", answer)
		}
	})
	t.Run("unknown child", func(t *testing.T) {
		if _, answer := alice.say(conv, "@delta hi"); !strings.Contains(answer, "no child agent called @delta") {
			t.Fatalf("%q", answer)
		}
	})
	t.Run("handoffs are stored and shown", func(t *testing.T) {
		var n int
		if err := m.DB.QueryRow(context.Background(), `select count(*) from handoffs where conversation_id = $1 and status = 'completed'`, conv).Scan(&n); err != nil || n != 3 {
			t.Fatalf("%d completed handoffs (%v), want 3", n, err)
		}
		var paths []string
		for len(paths) < 6 {
			f := ws.expect2()
			if f.Type != "agent.handoff" {
				continue
			}
			paths = append(paths, strings.Join(f.AgentPath, "/"))
		}
		if paths[0] != "lead/alpha" || paths[2] != "lead/beta" || paths[4] != "lead/gamma" {
			t.Fatalf("handoff paths %v", paths)
		}
	})
	t.Run("the user's off is a veto for every child", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		_, answer := alice.say(conv, "@alpha "+py("shared"))
		if !strings.Contains(answer, "switched off for this conversation in the chat toolbar") || strings.Contains(answer, "42") {
			t.Fatalf("%q", answer)
		}
		// The toolbar's on is the primary agent's: it does not switch gamma on.
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": true}, nil)
		if _, answer := alice.say(conv, "@gamma "+py("shared")); !strings.Contains(answer, "gamma's own setting") {
			t.Fatalf("%q", answer)
		}
		if _, answer := alice.say(conv, "@alpha "+py("shared")); !strings.Contains(answer, "42") {
			t.Fatalf("with no veto alpha keeps its own setting: %q", answer)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": nil}, nil)
	})
	t.Run("switching off mid-turn stops the next run", func(t *testing.T) {
		turn := alice.post(conv, "@alpha "+py("import time\ntime.sleep(2)\nprint('first')")+"\n"+py("print('second')"))
		for {
			f := ws.expect2()
			var d struct {
				TurnID int64 `json:"turn_id"`
			}
			_ = json.Unmarshal(f.Data, &d)
			if f.Type == "tool.started" && d.TurnID == turn {
				break
			}
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		alice.finishTurn(conv, turn)
		msgs := alice.messages(conv)
		answer := msgs[len(msgs)-1].Content
		if !strings.Contains(answer, "first") || strings.Contains(answer, "second") || !strings.Contains(answer, "switched the Python sandbox off") {
			t.Fatalf("%q", answer)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": nil}, nil)
	})
	t.Run("swarm mode off: no delegation", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/swarm_mode", conv), map[string]any{"enabled": false}, nil)
		if _, answer := alice.say(conv, "@beta "+py("shared")); !strings.Contains(answer, "Swarm mode is off") {
			t.Fatalf("%q", answer)
		}
	})
}

// TestCancelAndBusy: a second message while a turn runs is refused; cancel interrupts
// running code and the session keeps its state.
func TestCancelAndBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.sandboxNode(func(c *Config, _ *Main) { c.ShutdownTimeout = time.Second })
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "viewer", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	if status, _ := alice.say(conv, py("kept = 'still here'")); status != "completed" {
		t.Fatal(status)
	}
	turn := alice.post(conv, py("while True:\n    pass"))
	alice.must(409, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "and another"}, nil)
	viewer.must(403, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
	viewer.must(403, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "hi"}, nil)
	alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
	if status := alice.finishTurn(conv, turn).Status; status != "cancelled" {
		t.Fatalf("turn %s, want cancelled", status)
	}
	alice.must(409, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
	if status, answer := alice.say(conv, py("kept")); status != "completed" || !strings.Contains(answer, "still here") {
		t.Fatalf("after cancel: %s %q", status, answer)
	}

	t.Run("shutdown fails what is still running, with the reason", func(t *testing.T) {
		turn := alice.post(conv, py("while True:\n    pass"))
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		var status, reason string
		if err := m2db(t, e).QueryRow(context.Background(), `select status, error from turns where id = $1`, turn).Scan(&status, &reason); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || !strings.Contains(reason, "shut down") {
			t.Fatalf("turn %s: %q", status, reason)
		}
	})
}

// m2db opens the env's database directly, for checks after a node has closed.
func m2db(t *testing.T, e *testEnv) *pgx.Conn {
	conn, err := pgx.Connect(context.Background(), e.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestMessageRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node(func(c *Config, _ *Main) { c.RateMessages = 2 })
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	req := fmt.Sprintf("/api/v1/conversations/%d/messages", conv)
	// Each answer says where the limit stands (the IETF draft's RateLimit headers).
	rateHeaders := func(h http.Header) string {
		return fmt.Sprintf("limit %s remaining %s policy %s", h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Policy"))
	}
	for i := range 2 {
		resp, raw := alice.rawDo("POST", req, map[string]any{"content": "hi"})
		reset, _ := strconv.Atoi(resp.Header.Get("RateLimit-Reset"))
		if want := fmt.Sprintf("limit 2 remaining %d policy 2;w=60", 1-i); resp.StatusCode != 202 || rateHeaders(resp.Header) != want || reset < 1 || reset > 60 {
			t.Fatalf("message %d: %d %s, %s, reset %q, want %s and a reset within the minute", i+1, resp.StatusCode, raw, rateHeaders(resp.Header), resp.Header.Get("RateLimit-Reset"), want)
		}
		var started struct {
			TurnID int64 `json:"turn_id"`
		}
		if err := json.Unmarshal(raw, &started); err != nil {
			t.Fatal(err)
		}
		alice.finishTurn(conv, started.TurnID)
	}
	resp, raw := alice.rawDo("POST", req, map[string]any{"content": "hi"})
	if resp.StatusCode != 429 || !strings.Contains(string(raw), "Rate limit") || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("RateLimit-Remaining") != "0" || resp.Header.Get("RateLimit-Reset") != resp.Header.Get("Retry-After") {
		t.Fatalf("third message: %d %s, Retry-After %q, %s", resp.StatusCode, raw, resp.Header.Get("Retry-After"), rateHeaders(resp.Header))
	}
	// A request no limit counted says nothing of limits.
	if resp, _ := alice.rawDo("GET", req, nil); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Limit") != "" {
		t.Fatalf("a read: %d, %s", resp.StatusCode, rateHeaders(resp.Header))
	}
	bob, _ := m.user(t, "bob", false)
	bob.say(bob.createConversation(0), "limits are per user")
}

// TestTurnsAcrossNodes: a turn started on one node streams to a socket on another, and
// is cancelled through a third.
func TestTurnsAcrossNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runner := e.sandboxNode()
	watcher, canceller := e.node(), e.node()
	alice, _ := runner.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	ws := watcher.as(t, alice.token).socket()
	ws.subscribe(conv, nil)

	turn := alice.post(conv, py("print('started', flush=True)\nwhile True:\n    pass"))
	for f := ws.expect2(); f.Type != "tool.output"; f = ws.expect2() {
	}
	canceller.as(t, alice.token).must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
	if status := alice.finishTurn(conv, turn).Status; status != "cancelled" {
		t.Fatalf("turn %s, want cancelled", status)
	}
	for {
		f := ws.expect2()
		if f.Type == "turn.failed" {
			if !strings.Contains(string(f.Data), "cancelled") {
				t.Fatalf("%s", f.Data)
			}
			break
		}
	}
}
