package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// buildSandchat builds this command's binary into a temporary directory.
func buildSandchat(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandchat")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// serverProcess is a real sandchat binary serving on its own address, on the test's
// database and Redis prefix.
type serverProcess struct {
	cmd     *exec.Cmd
	addr    string
	token   string // of alice, a user made with `sandchat user create`
	logs    *testenv.Buffer
	exited  chan struct{} // closed when the process is gone
	waitErr error         // how it ended, once exited is closed
}

// startServer builds the binary, makes alice through the CLI and runs serve, with the
// openai provider at llmURL and then the SANDCHAT_* settings of env, until it answers
// /healthz. The process is killed (resumed first, if the test paused it) when the test
// ends, and its output logged if the test failed.
func startServer(t *testing.T, e *testEnv, llmURL, llmKey string, env ...string) *serverProcess {
	t.Helper()
	bin := buildSandchat(t)
	s := &serverProcess{addr: freeAddr(t), logs: &testenv.Buffer{}, exited: make(chan struct{})}
	env = append(append(os.Environ(),
		"SANDCHAT_ADDR="+s.addr,
		"SANDCHAT_DATABASE_URL="+e.databaseURL,
		"SANDCHAT_REDIS_URL="+testenv.RedisURL(),
		"SANDCHAT_REDIS_PREFIX="+e.redisPrefix,
		"SANDCHAT_SANDBOX_ENABLED=false",
		"SANDCHAT_LLM_PROVIDER=openai",
		"SANDCHAT_LLM_BASE_URL="+llmURL,
		"SANDCHAT_LLM_API_KEY="+llmKey,
		"SANDCHAT_LLM_MAX_RETRIES=0",
		"SANDCHAT_LOG_LEVEL=warn",
	), env...)
	var stdout, stderr bytes.Buffer
	create := exec.Command(bin, "user", "create", "--name", "alice")
	create.Env, create.Stdout, create.Stderr = env, &stdout, &stderr
	if err := create.Run(); err != nil {
		t.Fatalf("user create: %v\n%s", err, stderr.String())
	}
	s.token = strings.TrimSpace(stdout.String())

	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env, s.cmd.Stdout, s.cmd.Stderr = env, s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not exit")
		}
		if t.Failed() {
			t.Logf("serve output:\n%s", s.logs.String())
		}
	})
	eventually(t, 60*time.Second, "serve to listen on "+s.addr, func() bool {
		select {
		case <-s.exited:
			t.Fatalf("serve exited: %v\n%s", s.waitErr, s.logs.String())
		default:
		}
		resp, err := http.Get("http://" + s.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return s
}

// heldModel is an OpenAI-compatible endpoint whose answer is held back: it streams its
// first words, says so on asked, and finishes only once release is closed (or the
// client goes away).
func heldModel(t *testing.T, release <-chan struct{}) (url string, asked <-chan struct{}) {
	ask := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		flusher := w.(http.Flusher)
		send := func(delta map[string]any, finish any) {
			b, _ := json.Marshal(map[string]any{"id": "chatcmpl-held", "object": "chat.completion.chunk", "created": time.Now().Unix(),
				"model": "m", "choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			flusher.Flush()
		}
		send(map[string]any{"role": "assistant", "content": "Once upon a time"}, nil)
		select {
		case ask <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		send(map[string]any{"content": ", the end."}, nil)
		send(map[string]any{}, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ask
}

// TestCrashMidTurn kills a server with SIGKILL while its turn waits on the model; the
// node that takes over fails the turn with a reason, keeps the user's message once and
// lets the conversation go on.
func TestCrashMidTurn(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Reply{Stall: true})
	e := newEnv(t)
	serve := startServer(t, e, srv.URL, srv.APIKey)
	alice := &client{t: t, base: "http://" + serve.addr, token: serve.token}
	conv := alice.createConversation(0)
	const content = "Tell me a long story."
	turn := alice.post(conv, content)

	// The turn is in the model's stream when the endpoint has its request.
	eventually(t, 30*time.Second, "a request at the model endpoint", func() bool { return len(srv.Requests()) > 0 })
	var tj turnJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/turns/%d", conv, turn), nil, &tj)
	if tj.Status != "running" {
		t.Fatalf("turn %+v before the kill, want running", tj)
	}
	if err := serve.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case <-serve.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve survived SIGKILL")
	}

	// Another node on the same database and Redis takes over, with the default 30 s
	// stale limit: the dead node's liveness key expiring is what tells it.
	m := e.node()
	alice = m.as(t, serve.token)
	tj = alice.awaitTurn(conv, turn, 15*time.Second)
	t.Logf("turn of the killed server failed %s after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if tj.Status != "failed" || !strings.Contains(tj.Error, "server") || !strings.Contains(tj.Error, "stopped") {
		t.Fatalf("turn %+v, want failed because its server stopped", tj)
	}
	var running int
	if err := m.DB.QueryRow(context.Background(), `select count(*) from turns where status = 'running'`).Scan(&running); err != nil || running != 0 {
		t.Fatalf("%d turns running after the takeover (%v)", running, err)
	}

	msgs := alice.messages(conv)
	var users int
	for _, msg := range msgs {
		if msg.Role == "user" && msg.Content == content {
			users++
		}
	}
	if users != 1 || len(msgs) != 1 {
		t.Fatalf("stored messages %+v, want the user's message exactly once", msgs)
	}

	// The conversation is free again: a new message starts a turn that finishes (the
	// new node's default model is the builtin one).
	next := alice.post(conv, "Are you back?")
	if tj := alice.finishTurn(conv, next); tj.Status != "completed" {
		t.Fatalf("turn after the restart %+v, want completed", tj)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d requests to the model endpoint, want 1", n)
	}
}

// TestCrashMidRun kills a server with SIGKILL while its turn runs Python. The node that
// fails the turn closes the run's record with it (it stayed pending for good), saying
// what became of the run; and a session rebuilt by replay from the log leaves that run
// out, as it does every run that did not succeed.
func TestCrashMidRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.copyBase(baseSeed, e.redisPrefix)
	serve := startServer(t, e, "http://127.0.0.1:1/v1", "sk-unused", "SANDCHAT_LLM_PROVIDER=builtin",
		"SANDCHAT_SANDBOX_ENABLED=true", "SANDCHAT_SANDBOX_WARM_POOL=0", "SANDCHAT_SANDBOX_WARM_POOL_MAX=0",
		"SANDCHAT_SANDBOX_WARM_SPARES=0", "SANDCHAT_SANDBOX_PACKAGE_CDN=off")
	alice := &client{t: t, base: "http://" + serve.addr, token: serve.token}
	coder := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(coder.ID)
	path := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv)
	eventually(t, 90*time.Second, "the engine to run code", func() bool {
		return alice.do("POST", path, map[string]any{"code": "y = 2"}, nil) == 200
	})
	turn := alice.post(conv, "Please run this:\n"+py("x = 1\nimport time\ntime.sleep(300)"))
	db := m2db(t, e)
	eventually(t, 30*time.Second, "the turn's run recorded as pending", func() bool {
		var n int
		_ = db.QueryRow(context.Background(), `select count(*) from executions where turn_id = $1 and status = 'pending'`, turn).Scan(&n)
		return n == 1
	})
	if err := serve.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-serve.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve survived SIGKILL")
	}

	m := e.sandboxNode()
	alice = m.as(t, serve.token)
	if tj := alice.awaitTurn(conv, turn, 30*time.Second); tj.Status != "failed" {
		t.Fatalf("turn %+v, want failed because its server stopped", tj)
	}
	var ex struct {
		ID     int64
		Status string
		Error  *struct{ Type, Message string }
	}
	if err := db.QueryRow(context.Background(), `select id from executions where turn_id = $1`, turn).Scan(&ex.ID); err != nil {
		t.Fatal(err)
	}
	alice.must(200, "GET", fmt.Sprintf("%s/%d", path, ex.ID), nil, &ex)
	if ex.Status != "failed" || ex.Error == nil || !strings.Contains(ex.Error.Message, "stopped") {
		t.Fatalf("the run of the failed turn: %+v, want failed because its server stopped", ex)
	}

	// Redis loses the session: it is rebuilt from the log, without the lost run.
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, fmt.Sprintf("%ssandbox:{conv:%d}*", e.redisPrefix, conv)).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("session keys %v: %v", keys, err)
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	r := alice.run(conv, "(y, 'x' in globals())")
	if r.Status != "success" || r.Result == nil || *r.Result != "(2, False)" || r.Session.RestoredFrom != "replay" {
		t.Fatalf("rebuilt session: %s %v from %s, want (2, False) by replay", r.Status, r.Result, r.Session.RestoredFrom)
	}
}
