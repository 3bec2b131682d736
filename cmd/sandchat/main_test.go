package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if rdb, err := redis.ParseURL(testenv.RedisURL()); err == nil {
		c := redis.NewClient(rdb)
		testenv.DropPrefix(c, baseSeed)
		_ = c.Close()
	}
	os.Exit(code)
}

// baseSeed holds the sandbox's base snapshot, published by the first engine the tests
// boot: later nodes find it in Redis and restore it, as a second node of one build
// does, instead of each booting Pyodide afresh.
var baseSeed = testenv.Name("test-base:") + ":"

var baseKeys = []string{"sandbox:build:*", "sandbox:base:*"}

func (e *testEnv) copyBase(from, to string) {
	for _, k := range baseKeys {
		if err := testenv.CopyKeys(e.rdb, from, to, k); err != nil {
			e.t.Fatalf("copy the base snapshot: %v", err)
		}
	}
}

// tlog sends a server's logs to the test's log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// testEnv is one database and one Redis prefix that any number of nodes share.
type testEnv struct {
	t           *testing.T
	databaseURL string
	rdb         *redis.Client // closed when the test ends
	redisPrefix string
}

// newEnv gives the test a schema and a prefix of its own. Everything a test starts works
// under them (nodes, engines with their own cgroups, server processes, the fault suite's
// own Postgres and Redis), so tests call t.Parallel: most of their time is spent waiting
// on processes. Tests stay serial that set environment variables or drive Chromium.
func newEnv(t *testing.T) *testEnv {
	rdb, prefix := testenv.Redis(t)
	return &testEnv{t: t, databaseURL: testenv.DatabaseURL(t), rdb: rdb, redisPrefix: prefix}
}

// node starts a real Main on a free port. mutate adjusts its config.
func (e *testEnv) node(mutate ...func(*Config, *Main)) *Main {
	t := e.t
	cfg := Config{
		Addr: "127.0.0.1:0", DatabaseURL: e.databaseURL, RedisURL: testenv.RedisURL(), RedisPrefix: e.redisPrefix,
		EventRetention: 24 * time.Hour, ShutdownTimeout: 5 * time.Second, LogLevel: "info", LogFormat: "text",
		TurnStaleAfter: 30 * time.Second, LLM: LLMConfig{Provider: "builtin"},
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for _, f := range mutate {
		f(&m.Config, m)
	}
	if !m.Config.Sandbox.Enabled {
		// Tests about toggles, not engines: the sandbox counts as running, so resolution
		// is seen through every source without booting Deno for each node.
		m.Probes = map[string]toolkits.Probe{
			toolkits.PyodideSandbox: func() (bool, string) { return true, "" },
		}
	}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// sandboxNode starts a node running the real engine, small enough for a 2-core
// machine, and waits for the engine to finish booting. mutate adjusts its config.
func (e *testEnv) sandboxNode(mutate ...func(*Config, *Main)) *Main {
	e.t.Helper()
	e.copyBase(baseSeed, e.redisPrefix)
	m := e.node(append([]func(*Config, *Main){withEngine(e.redisPrefix)}, mutate...)...)
	awaitEngine(e.t, m)
	e.copyBase(e.redisPrefix, baseSeed)
	return m
}

// withEngine gives a node the real engine, keeping its sessions under prefix.
func withEngine(prefix string) func(*Config, *Main) {
	return func(c *Config, m *Main) {
		c.Sandbox.Enabled = true
		c.Sandbox.Engine = sandbox.DefaultConfig()
		// No pool: processes a test never takes would cost CPU (see sandbox's testConfig).
		c.Sandbox.Engine.WarmPool, c.Sandbox.Engine.WarmPoolMax, c.Sandbox.Engine.WarmSpares = 0, 0, 0
		c.Sandbox.Engine.RedisPrefix = prefix
		// Tests reach no internet: packages come from what they serve themselves.
		c.Sandbox.Engine.PackageCDN = sandbox.CDNOff
		m.Probes, m.SandboxEngine = nil, nil
	}
}

// awaitEngine waits for m's engine to finish booting.
func awaitEngine(t *testing.T, m *Main) {
	t.Helper()
	var reason string
	if _, ok := poll(90*time.Second, func() bool {
		var ok bool
		ok, reason = m.Engine.Available()
		return ok
	}); !ok {
		t.Fatalf("sandbox did not start: %s (run `make services` to install the runtime)", reason)
	}
}

// eventually and poll are the suite's one polling helper (migrations/testenv).
var eventually, poll = testenv.Eventually, testenv.Poll

// every calls fn every interval, in the background, until the test ends or fn fails.
func every(t *testing.T, interval time.Duration, fn func() error) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval):
				if fn() != nil {
					return
				}
			}
		}
	}()
}

// client is a user talking to one node.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (m *Main) as(t *testing.T, token string) *client {
	return &client{t: t, base: "http://" + m.Addr(), token: token}
}

// user creates a user directly in the store and returns it as a client of m.
func (m *Main) user(t *testing.T, name string, admin bool) (*client, int64) {
	u, token, err := m.Users.CreateUser(context.Background(), name, admin)
	if err != nil {
		t.Fatal(err)
	}
	return m.as(t, token), u.ID
}

// rawDo sends a request (a string body as it is, anything else as JSON) and returns the
// response with its body read.
func (c *client) rawDo(method, path string, body any) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// do sends a request, checks that an API error is a well-formed problem, and decodes the
// JSON answer into out (when not nil).
func (c *client) do(method, path string, body any, out any) int {
	c.t.Helper()
	resp, raw := c.rawDo(method, path, body)
	if resp.StatusCode >= 400 && strings.HasPrefix(path, "/api/") {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			c.t.Errorf("%s %s: error %d with content type %q, want problem+json", method, path, resp.StatusCode, ct)
		}
		var p struct {
			Code, Detail string
			Status       int
		}
		if err := json.Unmarshal(raw, &p); err != nil || p.Code == "" || p.Detail == "" || p.Status != resp.StatusCode {
			c.t.Errorf("%s %s: malformed problem %s", method, path, raw)
		}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

func (c *client) must(want int, method, path string, body any, out any) {
	c.t.Helper()
	if got := c.do(method, path, body, out); got != want {
		c.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

type agentJSON struct {
	ID            int64           `json:"id"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	InternalTools map[string]bool `json:"internal_tools"`
	Preload       []string        `json:"preload"`
	Children      []int64         `json:"children"`
	Version       int64           `json:"version"`
	Role          string          `json:"role"`
}

type toolState struct {
	ID           string `json:"id"`
	Enabled      bool   `json:"enabled"`
	Source       string `json:"source"`
	Override     *bool  `json:"override"`
	AgentSetting *bool  `json:"agent_setting"`
	Available    bool   `json:"available"`
}

func (c *client) createAgent(body map[string]any) agentJSON {
	c.t.Helper()
	var a agentJSON
	c.must(201, "POST", "/api/v1/agents", body, &a)
	return a
}

func (c *client) createConversation(agentID int64) int64 {
	c.t.Helper()
	var conv struct{ ID int64 }
	body := map[string]any{"title": "test"}
	if agentID != 0 {
		body["agent_id"] = agentID
	}
	c.must(201, "POST", "/api/v1/conversations", body, &conv)
	return conv.ID
}

func (c *client) tool(conv int64, id string) toolState {
	c.t.Helper()
	var states []toolState
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/internal-tools", conv), nil, &states)
	for _, s := range states {
		if s.ID == id {
			return s
		}
	}
	c.t.Fatalf("tool %s missing from %+v", id, states)
	return toolState{}
}

// frame is a server WebSocket frame: the server's own event type.
type frame = conversations.Event

type socket struct {
	t    *testing.T
	conn *websocket.Conn
	mu   sync.Mutex
}

func (c *client) dial(header http.Header, query string) (*websocket.Conn, *http.Response, error) {
	return c.dialWith(websocket.DefaultDialer, header, query)
}

func (c *client) dialWith(d *websocket.Dialer, header http.Header, query string) (*websocket.Conn, *http.Response, error) {
	url := strings.Replace(c.base, "http://", "ws://", 1) + "/api/v1/ws" + query
	return d.Dial(url, header)
}

func (c *client) socket() *socket {
	c.t.Helper()
	conn, resp, err := c.dial(http.Header{"Authorization": {"Bearer " + c.token}}, "")
	if err != nil {
		why := ""
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
			why = fmt.Sprintf(" (%s: %s)", resp.Status, body)
		}
		c.t.Fatalf("dial: %v%s", err, why)
	}
	c.t.Cleanup(func() { conn.Close() })
	return &socket{t: c.t, conn: conn}
}

func (s *socket) send(v any) {
	s.t.Helper()
	if err := s.conn.WriteJSON(v); err != nil {
		s.t.Fatalf("ws write: %v", err)
	}
}

// next reads the next frame, failing the test after timeout.
func (s *socket) next(timeout time.Duration) (frame, error) {
	var f frame
	_ = s.conn.SetReadDeadline(time.Now().Add(timeout))
	_, data, err := s.conn.ReadMessage()
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(data, &f)
}

// expect reads frames until one of type typ arrives.
func (s *socket) expect(typ string) frame {
	s.t.Helper()
	for {
		f, err := s.next(10 * time.Second)
		if err != nil {
			s.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if f.Type == typ {
			return f
		}
	}
}

// quiet asserts that no frame of type typ arrives within d on a socket that stays
// open: a closed or failing socket is not silence. A timed-out read leaves the
// connection unusable, so quiet is the last read of a socket.
func (s *socket) quiet(typ string, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		f, err := s.next(time.Until(deadline))
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if err != nil {
			s.t.Fatalf("waiting to see no %s frame, the socket failed: %v", typ, err)
		}
		if f.Type == typ {
			s.t.Fatalf("unexpected %s frame: %s", typ, f.Data)
		}
	}
}

func (s *socket) subscribe(conv int64, since *int64) frame {
	s.t.Helper()
	msg := map[string]any{"type": "subscribe", "conversation_id": conv}
	if since != nil {
		msg["since"] = *since
	}
	s.send(msg)
	return s.expect("subscribed")
}

func ptr[T any](v T) *T { return &v }
