package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// lockedBuffer collects a subprocess's output while the test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCrashMidTurn kills a server with SIGKILL while its turn waits on the model; the
// node that takes over fails the turn with a reason, keeps the user's message once and
// lets the conversation go on.
func TestCrashMidTurn(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{Stall: true})
	e := newEnv(t)
	bin := buildSandchat(t)
	addr := freeAddr(t)
	env := append(os.Environ(),
		"SANDCHAT_ADDR="+addr,
		"SANDCHAT_DATABASE_URL="+e.databaseURL,
		"SANDCHAT_REDIS_URL="+testenv.RedisURL(),
		"SANDCHAT_REDIS_PREFIX="+e.redisPrefix,
		"SANDCHAT_SANDBOX_ENABLED=false",
		"SANDCHAT_LLM_PROVIDER=openai",
		"SANDCHAT_LLM_BASE_URL="+srv.URL,
		"SANDCHAT_LLM_API_KEY="+srv.APIKey,
		"SANDCHAT_LLM_MAX_RETRIES=0",
		"SANDCHAT_LOG_LEVEL=warn",
	)

	// A user, through the CLI.
	var stdout, stderr bytes.Buffer
	create := exec.Command(bin, "user", "create", "--name", "alice")
	create.Env, create.Stdout, create.Stderr = env, &stdout, &stderr
	if err := create.Run(); err != nil {
		t.Fatalf("user create: %v\n%s", err, stderr.String())
	}
	token := strings.TrimSpace(stdout.String())

	// The server that will die.
	logs := &lockedBuffer{}
	serve := exec.Command(bin, "serve")
	serve.Env, serve.Stdout, serve.Stderr = env, logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when the process is gone
	var waitErr error
	go func() { waitErr = serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = serve.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not exit")
		}
		if t.Failed() {
			t.Logf("serve output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("serve exited: %v\n%s", waitErr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not listening on %s after 60s\n%s", addr, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	alice := &client{t: t, base: "http://" + addr, token: token}
	conv := alice.createConversation(0)
	const content = "Tell me a long story."
	turn := alice.post(conv, content)

	// The turn is in the model's stream when the endpoint has its request.
	deadline = time.Now().Add(30 * time.Second)
	for len(srv.Requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the model endpoint got no request\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tj turnJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/turns/%d", conv, turn), nil, &tj)
	if tj.Status != "running" {
		t.Fatalf("turn %+v before the kill, want running", tj)
	}
	if err := serve.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve survived SIGKILL")
	}

	// Another node on the same database and Redis takes over, with the default 30 s
	// stale limit: the dead node's liveness key expiring is what tells it.
	m := e.node()
	alice = m.as(t, token)
	deadline = time.Now().Add(15 * time.Second)
	for {
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/turns/%d", conv, turn), nil, &tj)
		if tj.Status != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn still running 15s after its server was killed")
		}
		time.Sleep(100 * time.Millisecond)
	}
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
