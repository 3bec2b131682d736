package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

type problemJSON struct {
	Status     int
	Code       string
	Detail     string
	Dependency string
}

// unavailable asserts a 503 unavailable problem with Retry-After naming dep.
func (c *client) unavailable(dep, method, path string, body any) {
	c.t.Helper()
	resp, raw := c.rawDo(method, path, body)
	var p problemJSON
	_ = json.Unmarshal(raw, &p)
	if resp.StatusCode != 503 || p.Code != "unavailable" || p.Dependency != dep || resp.Header.Get("Retry-After") == "" {
		c.t.Fatalf("%s %s during the %s outage: %d Retry-After=%q %s, want 503 unavailable naming %s with Retry-After",
			method, path, dep, resp.StatusCode, resp.Header.Get("Retry-After"), raw, dep)
	}
}

// TestFaults injects faults into a real server running on its own Postgres cluster and
// its own Redis: each case shows a known failure answered without a 5xx (503 when a
// dependency is down), and no run, message or turn lost, doubled, stuck or zombie.
func TestFaults(t *testing.T) {
	t.Parallel()
	f := newFaultEnv(t)
	m := f.node(t)
	alice, _ := m.user(t, "alice", true)
	coder := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	ctx := context.Background()

	t.Run("metrics scrape after thousands of mixed requests", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		paths := []struct{ method, path string }{
			{"GET", "/healthz"}, {"GET", "/api/v1/me"}, {"GET", "/api/v1/internal-tools"},
			{"GET", fmt.Sprintf("/api/v1/conversations/%d", conv)}, {"GET", "/api/v1/conversations/abc"},
			{"DELETE", "/api/v1/me"}, {"PATCH", "/api/v1/agents"}, {"BREW", "/api/v1/me"},
			{"POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv)},
		}
		const total, workers = 3000, 8
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > total {
						return
					}
					p := paths[rand.IntN(len(paths))]
					path := p.path
					if i%7 == 0 {
						path = fmt.Sprintf("/no/such/%d/%x", i, rand.Uint64()) // unbounded paths
					}
					if i%500 == 0 {
						p.method, path = "GET", "/metrics"
					}
					req, _ := http.NewRequest(p.method, alice.base+path, strings.NewReader(`{"content":"x"}`))
					req.Header.Set("Authorization", "Bearer "+alice.token)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						failed.Store(err.Error())
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if path == "/metrics" && resp.StatusCode != 200 {
						failed.Store(fmt.Sprintf("/metrics answered %d after %d requests", resp.StatusCode, i))
					}
				}
			}()
		}
		wg.Wait()
		if v := failed.Load(); v != nil {
			t.Fatal(v)
		}
		resp, err := http.Get(alice.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || bytes.Contains(body, []byte("collected before")) {
			t.Fatalf("/metrics after %d requests: %d\n%.500s", total, resp.StatusCode, body)
		}
		series := 0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "sandchat_http_requests_total{") {
				series++
				if strings.Contains(line, "/no/such") || strings.Contains(line, "BREW") {
					t.Fatalf("a client-chosen string became a label: %s", line)
				}
			}
		}
		if series == 0 || series > 60 {
			t.Fatalf("%d request series after %d requests: want a few, bounded by the routes", series, total)
		}
		t.Logf("%d mixed requests, /metrics 200 with %d request series", total, series)
	})

	t.Run("NUL bytes: refused in input by field, kept in output", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		for _, c := range []struct{ method, path, field string }{
			{"POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), "content"},
			{"POST", "/api/v1/agents", "name"},
			{"POST", "/api/v1/conversations", "title"},
			{"POST", "/api/v1/users", "name"},
			{"POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), "code"},
		} {
			body := fmt.Sprintf(`{%q: "a\u0000b"}`, c.field)
			resp, raw := alice.rawDo(c.method, c.path, json.RawMessage(body))
			var p problemJSON
			_ = json.Unmarshal(raw, &p)
			if resp.StatusCode != 400 || !strings.HasPrefix(p.Detail, c.field+" ") {
				t.Errorf("%s %s with NUL in %s: %d %s, want 400 naming the field", c.method, c.path, c.field, resp.StatusCode, raw)
			}
		}

		// Output: stored as it was, and a turn that meets it completes.
		var run struct {
			ID     int64
			Status string
			Stdout string
			Error  struct{ Message string }
		}
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "nul\nraise nul"}, &run)
		var stored struct {
			Stdout string
			Status string
			Error  struct{ Message string }
		}
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions/%d", conv, run.ID), nil, &stored)
		if stored.Stdout != "a\x00b\n" || stored.Status != "error" || stored.Error.Message != "bad\x00byte" {
			t.Fatalf("stored run %+v, want the NUL bytes kept", stored)
		}
		ws := alice.socket()
		ws.subscribe(conv, nil)
		turn := alice.post(conv, "Run it:\n"+py("nul\nraise nul"))
		if status := alice.finishTurn(conv, turn).Status; status != "completed" {
			t.Fatalf("turn with NUL output %s, want completed", status)
		}
		done := ws.expect("tool.completed")
		var d struct{ Stdout string }
		_ = json.Unmarshal(done.Data, &d)
		if d.Stdout != "a\x00b\n" {
			t.Fatalf("tool.completed stdout %q", d.Stdout)
		}
		var tools int
		for _, msg := range alice.messages(conv) {
			if msg.Role == "tool" && strings.Contains(msg.Content, `a\u0000b`) {
				tools++
			}
		}
		if tools != 1 {
			t.Fatalf("%d tool messages with the output, want 1", tools)
		}
	})

	t.Run("Postgres down: 503 naming it, then recovery by itself", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		f.pg.stop()
		alice.unavailable("postgres", "GET", "/api/v1/me", nil)
		alice.unavailable("postgres", "GET", "/api/v1/me", nil) // after the pool saw it, too
		alice.unavailable("postgres", "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "hi"})
		alice.unavailable("postgres", "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "counter += 1"})
		alice.unavailable("postgres", "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil)
		alice.unavailable("postgres", "GET", "/api/v1/conversations", nil)
		f.pg.start()
		took := eventually(t, 10*time.Second, "GET /me after Postgres came back", func() bool {
			return alice.do("GET", "/api/v1/me", nil, nil) == 200
		})
		t.Logf("answered again %s after Postgres restarted", took.Round(time.Millisecond))
		// Nothing ran while it was down.
		if got := alice.run(conv, "print(counter)"); got.Stdout != "0\n" {
			t.Fatalf("counter %q after refused runs, want 0", got.Stdout)
		}
	})

	t.Run("Redis down: 503 naming it, then recovery by itself", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		f.redis.kill()
		alice.unavailable("redis", "POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "hi"})
		alice.unavailable("redis", "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "counter += 1"})
		alice.unavailable("redis", "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil)
		alice.must(200, "GET", "/api/v1/me", nil, nil) // what does not need Redis goes on
		// The server gives up joining the user's channel after 10 s; a client that waits
		// less gets no answer at all unless the refusal comes from Redis refusing.
		_, resp, err := alice.dialWith(&websocket.Dialer{HandshakeTimeout: 8 * time.Second}, http.Header{"Authorization": {"Bearer " + alice.token}}, "")
		if resp == nil {
			t.Fatalf("WebSocket during the Redis outage: no answer (%v), want 503 with Retry-After", err)
		}
		var p struct{ Dependency string }
		body, _ := io.ReadAll(resp.Body)
		if err == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || json.Unmarshal(body, &p) != nil || p.Dependency != "redis" {
			t.Fatalf("WebSocket during the Redis outage: %v %d Retry-After=%q %s, want 503 naming redis with Retry-After",
				err, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		f.redis.start()
		eventually(t, 10*time.Second, "a run after Redis came back", func() bool {
			return alice.do("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "counter += 1"}, nil) == 200
		})
		if msgs := alice.messages(conv); len(msgs) != 0 {
			t.Fatalf("messages %+v stored by refused requests", msgs)
		}
	})

	t.Run("Postgres dies mid-run: the run is recorded once, applied once", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		type answer struct {
			status int
			body   []byte
		}
		got := make(chan answer, 1)
		go func() {
			resp, raw := alice.rawDo("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "counter += 1\nblock midrun"})
			got <- answer{resp.StatusCode, raw}
		}()
		f.engine.waitStarted(t, "midrun")
		f.pg.stop()
		f.engine.release("midrun") // the state is committed to Redis while Postgres is down
		a := <-got
		var run struct {
			ID     int64
			Status string
			Notice string
		}
		_ = json.Unmarshal(a.body, &run)
		if a.status != 200 || run.Status != "success" || run.ID == 0 || !strings.Contains(run.Notice, "Do not run it again") {
			t.Fatalf("run whose state was committed during the outage: %d %s, want 200 success with a notice", a.status, a.body)
		}
		f.pg.start()
		db := f.pg.conn(t)
		took := eventually(t, 20*time.Second, "the run's record finished after Postgres came back", func() bool {
			var status string
			_ = db.QueryRow(ctx, `select status from executions where id = $1`, run.ID).Scan(&status)
			return status == "success"
		})
		var n int
		if err := db.QueryRow(ctx, `select count(*) from executions where conversation_id = $1`, conv).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d execution rows (%v), want 1", n, err)
		}
		if r := alice.run(conv, "print(counter)"); r.Stdout != "1\n" {
			t.Fatalf("counter %q, want the run applied exactly once", r.Stdout)
		}
		t.Logf("record written %s after Postgres restarted", took.Round(time.Millisecond))
	})

	t.Run("turn outlives a Postgres outage: finished, nothing lost, not stuck", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		turn := alice.post(conv, "Run it:\n"+py("counter += 1\nblock outage"))
		f.engine.waitStarted(t, "outage")
		f.pg.stop()
		f.engine.release("outage")
		time.Sleep(2 * time.Second)
		f.pg.start()
		tj := alice.finishTurn(conv, turn)
		if tj.Status != "completed" {
			t.Fatalf("turn %+v after a 2 s outage, want completed", tj)
		}
		roles := []string{}
		for _, msg := range alice.messages(conv) {
			roles = append(roles, msg.Role)
		}
		if strings.Join(roles, ",") != "user,assistant,tool,assistant" {
			t.Fatalf("messages %v, want user,assistant,tool,assistant", roles)
		}
		next := alice.post(conv, "again") // the conversation is free at once: no 409
		alice.finishTurn(conv, next)
		// The run's record, refused during the outage, is written once Postgres is back
		// (after the turn, on a busy machine): it lands, once.
		var n int
		db := f.pg.conn(t)
		if _, ok := poll(30*time.Second, func() bool {
			return db.QueryRow(ctx, `select count(*) from executions where conversation_id = $1 and status = 'success'`, conv).Scan(&n) == nil && n >= 1
		}); !ok || n != 1 {
			t.Fatalf("%d successful executions, want 1", n)
		}
	})

	t.Run("Redis flushed: the session is rebuilt by replay from Postgres", func(t *testing.T) {
		alice := m.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		for range 3 {
			alice.run(conv, "counter += 1")
		}
		alice.run(conv, "raise nul") // failed runs are not replayed
		rdb := f.redis.client(t)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r := alice.run(conv, "print(counter)")
		if r.Stdout != "3\n" || r.Session.RestoredFrom != "replay" {
			t.Fatalf("after FLUSHALL: stdout %q restored_from %q, want 3 by replay", r.Stdout, r.Session.RestoredFrom)
		}
		// A reset is a wall replay never crosses.
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, nil)
		alice.run(conv, "counter += 5")
		_ = rdb.FlushAll(ctx).Err()
		if r := alice.run(conv, "print(counter)"); r.Stdout != "5\n" {
			t.Fatalf("after reset and FLUSHALL: %q, want 5", r.Stdout)
		}
	})

	t.Run("Redis dies mid-run: a run answered 503 is not kept, nor replayed", func(t *testing.T) {
		n := f.sandboxNode(t)
		alice := n.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		alice.run(conv, "x = 2")
		path := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv)
		type answer struct {
			status int
			body   []byte
		}
		got := make(chan answer, 1)
		go func() {
			resp, raw := alice.rawDo("POST", path, map[string]any{"code": "import time\ntime.sleep(4)\nx += 100"})
			got <- answer{resp.StatusCode, raw}
		}()
		db := f.pg.conn(t)
		eventually(t, 10*time.Second, "the run recorded as pending", func() bool {
			var n int
			_ = db.QueryRow(ctx, `select count(*) from executions where conversation_id = $1 and status = 'pending'`, conv).Scan(&n)
			return n == 1
		})
		time.Sleep(time.Second) // the code is sleeping in the warm interpreter
		f.redis.kill()
		a := <-got
		f.redis.start()
		if a.status != 503 {
			t.Fatalf("run whose state could not be saved: %d %s, want 503", a.status, a.body)
		}
		var p problemJSON
		_ = json.Unmarshal(a.body, &p)
		t.Logf("answered %d: %s", a.status, p.Detail)
		var failed int64
		if err := db.QueryRow(ctx, `select max(id) from executions where conversation_id = $1`, conv).Scan(&failed); err != nil {
			t.Fatal(err)
		}
		var r runJSON
		eventually(t, 30*time.Second, "a run after Redis came back", func() bool {
			resp, raw := alice.rawDo("POST", path, map[string]any{"code": "x"})
			return resp.StatusCode == 200 && json.Unmarshal(raw, &r) == nil
		})
		if x := r.Result; x == nil || *x != "2" {
			t.Fatalf("after Redis came back: %s %v (restored from %s), want x = 2: the run answered 503 must not be applied",
				r.Status, *cmp.Or(x, new(string)), r.Session.RestoredFrom)
		}
		var stored struct {
			Status string
			Error  struct{ Message string }
		}
		alice.must(200, "GET", fmt.Sprintf("%s/%d", path, failed), nil, &stored)
		if stored.Status != "failed" || !strings.Contains(stored.Error.Message, "not kept") {
			t.Fatalf("run answered 503 recorded %+v, want failed, saying its effects were not kept", stored)
		}
		alice.run(conv, "x += 100") // the caller's retry
		if x := alice.eval(conv, "x"); x != "102" {
			t.Fatalf("x = %s after the retry, want 102", x)
		}
	})

	t.Run("WebSockets: stalled socket closed at once, removed member cut off, small frames", func(t *testing.T) {
		m := f.node(t, func(c *Config, _ *Main) { c.WSQueueBytes = 256 << 10 })
		alice := m.as(t, alice.token)
		bob, bobID := m.user(t, "bob", false)

		// A client that stops reading but keeps pinging.
		stalled := bob.socket()
		every(t, 100*time.Millisecond, func() error {
			_ = stalled.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			return nil
		})
		eventually(t, 5*time.Second, "socket registered", func() bool { return m.Hub.Clients() == 1 })
		pad := strings.Repeat("x", 64<<10)
		rdb := f.redis.client(t)
		start := time.Now()
		for i := range 400 {
			payload, _ := json.Marshal(map[string]any{"type": "flood", "data": map[string]any{"i": i, "pad": pad}})
			if err := rdb.Publish(ctx, fmt.Sprintf("faults:events:user:%d", bobID), payload).Err(); err != nil {
				t.Fatal(err)
			}
		}
		took := eventually(t, 5*time.Second, "the stalled, pinging socket closed", func() bool { return m.Hub.Clients() == 0 })
		t.Logf("stalled socket closed %s after the flood began (%s after the last frame)", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
		seen := ""
		_ = stalled.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := stalled.conn.ReadMessage(); err != nil {
				seen = err.Error()
				break
			}
		}
		t.Logf("the stalled client saw: %s", seen)

		// A removed member stops receiving.
		conv := alice.createConversation(coder.ID)
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
		bws := bob.socket()
		bws.subscribe(conv, nil)
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/swarm_mode", conv), map[string]any{"enabled": true}, nil)
		bws.expect("internal_tools.updated")
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d/members/%d", conv, bobID), nil, nil)
		if e := bws.expect("error"); e.ConversationID != conv {
			t.Fatalf("revocation frame %+v", e)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/swarm_mode", conv), map[string]any{"enabled": false}, nil)
		bws.quiet("internal_tools.updated", 500*time.Millisecond)

		// 2 MB of output: small frames, the whole output over REST.
		aws := alice.socket()
		aws.subscribe(conv, nil)
		turn := alice.post(conv, "Run it:\n"+py("big 2000000"))
		largest, streamed := 0, 0
		var execID int64
		for {
			fr, err := aws.next(30 * time.Second)
			if err != nil {
				t.Fatalf("socket: %v", err)
			}
			raw, _ := json.Marshal(fr)
			largest = max(largest, len(raw))
			if fr.Type == "tool.output" {
				streamed += len(fr.Data)
			}
			if fr.Type == "tool.completed" {
				var d struct {
					ExecutionID int64 `json:"execution_id"`
					Truncated   bool
				}
				_ = json.Unmarshal(fr.Data, &d)
				if !d.Truncated {
					t.Fatalf("tool.completed of 2 MB output not marked truncated")
				}
				execID = d.ExecutionID
			}
			if fr.Type == "turn.completed" || fr.Type == "turn.failed" {
				break
			}
		}
		if alice.finishTurn(conv, turn).Status != "completed" || largest > 64<<10 || streamed > 200<<10 {
			t.Fatalf("largest frame %d bytes, %d streamed: want frames under 64 KiB", largest, streamed)
		}
		var full struct{ Stdout string }
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions/%d", conv, execID), nil, &full)
		if len(full.Stdout) != 2000000 {
			t.Fatalf("full output over REST: %d bytes, want 2000000", len(full.Stdout))
		}
		t.Logf("2 MB run: largest frame %d bytes, %d bytes streamed live, full output over REST", largest, streamed)
	})

	t.Run("small ones: disabled sandbox, colonless header, long artifact path", func(t *testing.T) {
		off := f.node(t, func(_ *Config, m *Main) { m.SandboxEngine = nil })
		alice := off.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		for _, method := range []string{"GET", "DELETE"} {
			resp, raw := alice.rawDo(method, fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil)
			if resp.StatusCode != 503 || !bytes.Contains(raw, []byte("SANDCHAT_SANDBOX_ENABLED")) {
				t.Fatalf("%s session with the sandbox disabled: %d %s", method, resp.StatusCode, raw)
			}
		}

		c, err := net.Dial("tcp", off.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A header line without a colon is refused as it is read (fasthttp 1.52
		// waited out its read timeout on it instead). The client waits half the body's
		// minute: an answer proves the connection is not held.
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "HTTP/1.1 400 Bad Request" {
			t.Fatalf("colonless header answered %q (%v), want 400 Bad Request", line, err)
		}

		alice = m.as(t, alice.token)
		conv = alice.createConversation(coder.ID)
		r := alice.run(conv, "artifact 400")
		if r.Status != "success" || len(r.Artifacts) != 1 || r.Artifacts[0].ID == 0 || len([]rune(r.Artifacts[0].Name)) > 255 ||
			!strings.HasSuffix(r.Artifacts[0].Name, ".csv") {
			t.Fatalf("run with a 400-character artifact path: %+v", r)
		}
	})

	t.Run("shutdown at its deadline: exit 0, cut-off run named", func(t *testing.T) {
		n := f.node(t, func(c *Config, _ *Main) { c.ShutdownTimeout = time.Second })
		alice := n.as(t, alice.token)
		conv := alice.createConversation(coder.ID)
		turn := alice.post(conv, "Run it:\n"+py("counter += 1\nblock shutdown"))
		f.engine.waitStarted(t, "shutdown")
		if err := n.Close(); err != nil {
			t.Fatalf("Close at the shutdown deadline: %v, want nil (exit 0)", err)
		}
		db := f.pg.conn(t)
		var status, turnErr string
		var execErr []byte
		if err := db.QueryRow(ctx, `select status, error from executions where conversation_id = $1`, conv).Scan(&status, &execErr); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || !bytes.Contains(execErr, []byte("shut down")) {
			t.Fatalf("cut-off run recorded %s %s, want failed because the server shut down", status, execErr)
		}
		if err := db.QueryRow(ctx, `select status, coalesce(error, '') from turns where id = $1`, turn).Scan(&status, &turnErr); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || !strings.Contains(turnErr, "shut down") {
			t.Fatalf("cut-off turn %s %q", status, turnErr)
		}
	})
}

// TestZombieTurn pauses a server (SIGSTOP) in the middle of a turn. Another node knows
// it is gone within seconds (its liveness key in Redis expired, long before the stale
// limit) and fails the turn; when the paused server resumes, every write it tries for
// that turn is fenced out, so nothing is appended to the failed turn or after newer ones.
func TestZombieTurn(t *testing.T) {
	t.Parallel()
	// A model whose answer is held back until the test releases it: the paused server
	// gets it when it wakes up, and then tries to store it.
	release := make(chan struct{})
	llm, asked := heldModel(t, release)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	e := newEnv(t)
	serve := startServer(t, e, llm, "sk-zombie")
	alice := &client{t: t, base: "http://" + serve.addr, token: serve.token}
	conv := alice.createConversation(0)
	turn := alice.post(conv, "Tell me a long story.")
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not asked")
	}
	// A second node, with the default 30 s stale limit.
	b := e.node()
	alice = b.as(t, serve.token)
	eventually(t, 10*time.Second, "the first words stored as a delta", func() bool {
		var n int
		_ = b.DB.QueryRow(context.Background(), `select count(*) from conversation_events where conversation_id = $1 and type = 'message.delta'`, conv).Scan(&n)
		return n > 0
	})
	if err := serve.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	tj := alice.awaitTurn(conv, turn, 20*time.Second)
	took := time.Since(paused)
	if tj.Status != "failed" || !strings.Contains(tj.Error, "stopped") {
		t.Fatalf("turn %+v, want failed because its server stopped", tj)
	}
	t.Logf("turn of the paused server failed %s after SIGSTOP (stale limit 30 s)", took.Round(time.Millisecond))

	ctx := context.Background()
	// A newer turn runs on the live node while the old one is still paused.
	next := alice.post(conv, "Are you there?")
	if s := alice.finishTurn(conv, next); s.Status != "completed" {
		t.Fatalf("newer turn %+v", s)
	}
	var lastSeq int64
	_ = b.DB.QueryRow(ctx, `select max(seq) from conversation_events where conversation_id = $1`, conv).Scan(&lastSeq)

	// The paused server wakes up with the model's answer waiting: it must notice it
	// lost the turn and write nothing.
	close(release)
	if err := serve.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the resumed server to stop its lost turn", func() bool {
		return strings.Contains(serve.logs.String(), "ended elsewhere")
	})
	time.Sleep(500 * time.Millisecond)
	var zombie int
	if err := b.DB.QueryRow(ctx, `select count(*) from conversation_events where conversation_id = $1 and seq > $2`, conv, lastSeq).Scan(&zombie); err != nil {
		t.Fatal(err)
	}
	var late int
	if err := b.DB.QueryRow(ctx, `select count(*) from messages where turn_id = $1 and role <> 'user'`, turn).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if zombie != 0 || late != 0 {
		t.Fatalf("the resumed server wrote %d events and %d messages after losing its turn", zombie, late)
	}
	var status string
	_ = b.DB.QueryRow(ctx, `select status from turns where id = $1`, turn).Scan(&status)
	if status != "failed" {
		t.Fatalf("lost turn is %s after its server resumed", status)
	}
}

// TestCancelWithoutRedis cancels, on one node, a turn another node runs, while Redis is
// down and just after it restarted. The cancel's fast path is Redis pub/sub, which
// drops what is published while the runner's subscription is away; the turn still ends
// cancelled within a few seconds, as fast as the runner's heartbeat at worst.
func TestCancelWithoutRedis(t *testing.T) {
	t.Parallel()
	f := newFaultEnv(t)
	runner := f.node(t)
	other := f.node(t)
	alice, _ := runner.user(t, "alice", false)
	coder := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	elsewhere := other.as(t, alice.token)
	cancel := func(conv, turn int64) int {
		return elsewhere.do("POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
	}
	// cancelled waits for the turn to end and says how long after sent it did.
	cancelled := func(conv, turn int64, sent time.Time, within time.Duration) time.Duration {
		t.Helper()
		if tj := alice.awaitTurn(conv, turn, within); tj.Status != "cancelled" {
			t.Fatalf("turn %+v, want cancelled", tj)
		}
		return time.Since(sent)
	}

	t.Run("Redis down", func(t *testing.T) {
		conv := alice.createConversation(coder.ID)
		turn := alice.post(conv, "Run it:\n"+py("block down"))
		f.engine.waitStarted(t, "down")
		f.redis.kill()
		defer f.redis.start()
		sent := time.Now()
		if code := cancel(conv, turn); code != 202 {
			t.Fatalf("cancel during the Redis outage: %d, want 202", code)
		}
		t.Logf("cancel answered in %s", time.Since(sent).Round(time.Millisecond))
		// Ending a turn publishes its last events, each retried while Redis is down.
		t.Logf("turn cancelled %s after the cancel was sent", cancelled(conv, turn, sent, 20*time.Second).Round(time.Millisecond))
	})

	t.Run("just after a Redis restart", func(t *testing.T) {
		conv := alice.createConversation(coder.ID)
		turn := alice.post(conv, "Run it:\n"+py("block restart"))
		f.engine.waitStarted(t, "restart")
		f.redis.kill()
		time.Sleep(2 * time.Second)
		f.redis.start()
		sent := time.Now()
		if code := cancel(conv, turn); code != 202 {
			t.Fatalf("cancel after Redis restarted: %d, want 202", code)
		}
		t.Logf("turn cancelled %s after the cancel was sent", cancelled(conv, turn, sent, 3*time.Second).Round(time.Millisecond))
	})
}
