package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// withLogs sends the node's logs, from level on, to buf as JSON lines.
func withLogs(buf *testenv.Buffer, level slog.Level) func(*Config, *Main) {
	return func(c *Config, m *Main) {
		c.LogLevel, c.LogFormat = strings.ToLower(level.String()), "json"
		m.Log = newLogger(*c, buf)
	}
}

// logLines returns the JSON log lines in buf whose fields hold want (name, value).
func logLines(t *testing.T, buf *testenv.Buffer, want ...any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && fmt.Sprint(rec[want[i].(string)]) == fmt.Sprint(want[i+1])
		}
		if match {
			out = append(out, rec)
		}
	}
	return out
}

// sendWithID sends a request with an X-Request-Id and returns the response's.
func (c *client) sendWithID(method, path, id string, body any) (status int, got string) {
	c.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, c.base+path, bytes.NewReader(raw))
	if body == nil {
		req, _ = http.NewRequest(method, c.base+path, nil)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Request-Id")
}

// TestRequestLogs: every request is named by an X-Request-Id (the client's when sane,
// else a new one), returned, and on every log line the request leads to: its line of
// the access log (method, route, status, duration, user; never a token), the run it
// made, the turn it started and that turn's run. Each run writes one line at info.
func TestRequestLogs(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	m := newEnv(t).sandboxNode(withLogs(&logs, slog.LevelInfo))
	alice, aliceID := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	runs := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv)

	t.Run("a run's request, its access line and its run line", func(t *testing.T) {
		if code, id := alice.sendWithID("POST", runs, "req-run.1", map[string]any{"code": "x = 41\nx + 1"}); code != 200 || id != "req-run.1" {
			t.Fatalf("run: %d, X-Request-Id %q", code, id)
		}
		access := logLines(t, &logs, "msg", "request", "request_id", "req-run.1")
		if len(access) != 1 || access[0]["level"] != "INFO" || access[0]["method"] != "POST" ||
			access[0]["route"] != "/api/v1/conversations/:id/sandbox/executions" || access[0]["status"] != float64(200) ||
			access[0]["user_id"] != float64(aliceID) || access[0]["ms"] == nil {
			t.Fatalf("access lines %v", access)
		}
		run := logLines(t, &logs, "msg", "sandbox run", "request_id", "req-run.1")
		if len(run) != 1 || run[0]["level"] != "INFO" || run[0]["status"] != "success" || run[0]["from"] != "fresh" || run[0]["total_ms"] == nil {
			t.Fatalf("run lines %v", run)
		}
		if code, _ := alice.sendWithID("POST", runs, "req-run.2", map[string]any{"code": "1 / 0"}); code != 200 {
			t.Fatalf("run: %d", code)
		}
		if run := logLines(t, &logs, "msg", "sandbox run", "request_id", "req-run.2"); len(run) != 1 || run[0]["status"] != "error" || run[0]["from"] != "live" {
			t.Fatalf("run lines %v", run)
		}
	})
	t.Run("an id that is not sane is replaced", func(t *testing.T) {
		for _, bad := range []string{strings.Repeat("a", 129), "two words", "<script>", "a\tb"} {
			code, id := alice.sendWithID("GET", "/api/v1/me", bad, nil)
			if code != 200 || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
				t.Fatalf("id %q came back as %q (%d): want a new one", bad, id, code)
			}
		}
		if _, id := alice.sendWithID("GET", "/api/v1/me", "", nil); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
			t.Fatalf("no id sent, %q returned: want a new one", id)
		}
		// A refusal carries its id too, in its line and its answer.
		if code, id := m.as(t, "").sendWithID("GET", "/api/v1/me", "anon-1", nil); code != 401 || id != "anon-1" ||
			len(logLines(t, &logs, "msg", "request", "request_id", "anon-1", "status", 401)) != 1 {
			t.Fatalf("refused request: %d %q", code, id)
		}
	})
	t.Run("a turn's lines carry the id of the request that started it", func(t *testing.T) {
		other := alice.createConversation(agent.ID)
		code, id := alice.sendWithID("POST", fmt.Sprintf("/api/v1/conversations/%d/messages", other), "req-turn", map[string]any{"content": py("y = 2\nprint(y)")})
		if code != 202 || id != "req-turn" {
			t.Fatalf("message: %d %q", code, id)
		}
		eventually(t, 90*time.Second, "the turn's run logged", func() bool {
			return len(logLines(t, &logs, "msg", "sandbox run", "request_id", "req-turn", "status", "success")) == 1
		})
	})
	t.Run("tokens in URLs are never logged", func(t *testing.T) {
		secret := alice.token
		resp, _ := alice.rawDo("GET", "/api/v1/files/999999?access_token="+secret, nil)
		if resp.StatusCode != 404 {
			t.Fatalf("file: %d", resp.StatusCode)
		}
		if conn, _, err := m.as(t, "").dial(nil, "?access_token="+secret); err == nil {
			conn.Close()
		} else {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the socket's upgrade logged", func() bool {
			return len(logLines(t, &logs, "msg", "request", "route", "/api/v1/ws", "status", 101)) == 1
		})
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a token reached the logs:\n%s", logs.String())
		}
		for _, route := range []string{"/api/v1/files/:id", "/api/v1/ws"} {
			if l := logLines(t, &logs, "msg", "request", "route", route); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["url"]), "access_token=REDACTED") {
				t.Fatalf("%s lines %v", route, l)
			}
		}
	})
	t.Run("probes stay out of the access log at info", func(t *testing.T) {
		m.as(t, "").must(200, "GET", "/healthz", nil, nil)
		scrape(t, m)
		if l := logLines(t, &logs, "msg", "request", "route", "/healthz"); len(l) != 0 {
			t.Fatalf("probe lines %v", l)
		}
	})
}
