package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// The fault suite runs its own Postgres cluster and its own Redis on free ports, so it
// can stop, kill and flush them without touching the servers other tests share.

// pgCluster is a throwaway Postgres cluster: initdb in a temporary directory, the
// server run as the postgres user when the tests run as root.
type pgCluster struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	cred   *syscall.Credential
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func startPostgres(t *testing.T) *pgCluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Fatal("initdb not found under /usr/lib/postgresql/*/bin: install PostgreSQL (`make services` does)")
	}
	sort.Strings(bins)
	p := &pgCluster{t: t, bin: filepath.Dir(bins[len(bins)-1]), port: freePort(t)}
	dir, err := os.MkdirTemp("", "sandchat-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		// Postgres refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user to run the test cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := p.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *pgCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// URL is the cluster's sandchat database.
func (p *pgCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/sandchat_faults?sslmode=disable", p.port)
}

func (p *pgCluster) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.command("postgres", "-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off")
	logs := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	gone := false
	if _, ok := poll(30*time.Second, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port))
		if err == nil {
			c.Close(context.Background())
		}
		return err == nil
	}); gone || !ok {
		p.t.Fatalf("postgres not ready (exited: %v):\n%s", gone, logs.String())
	}
}

// stop shuts the server down the fast way: connections are terminated, as in a
// restart or a failover.
func (p *pgCluster) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// conn opens a connection to the cluster's database, for checks the API cannot make.
func (p *pgCluster) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), p.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// redisServer is a Redis without persistence: a kill loses everything, like a crash of
// a cache node.
type redisServer struct {
	t      *testing.T
	port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: install Redis (`make services` does)")
	}
	r := &redisServer{t: t, port: freePort(t), dir: t.TempDir()}
	_ = bin
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", r.dir)
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port)})
	defer rdb.Close()
	eventually(r.t, 10*time.Second, "redis ready", func() bool { return rdb.Ping(context.Background()).Err() == nil })
}

func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

func (r *redisServer) client(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// scriptedEngine plays the sandbox engine's side of the contract over the suite's own
// Redis, with a language of its own so faults can be placed inside a run:
//
//	counter += N     adds N to the session's counter
//	print(counter)   prints it
//	nul              prints "a\x00b"
//	raise nul        fails the run with a Python error whose message holds a NUL
//	big N            prints N bytes (streamed through OnOutput too)
//	artifact N       returns an artifact whose path is N characters long
//	block NAME       waits until the test releases NAME (or the run is cancelled)
//
// State is committed to Redis only when the run ends, as the real engine does; with no
// state in Redis it rebuilds the session from the node's record of runs (the History the
// real engine is given) and says "replay". It takes no budget: its states are a few
// bytes, and its saves need only Redis, so faults of Postgres fall where the test puts them.
type scriptedEngine struct {
	rdb     *redis.Client
	prefix  string
	history atomic.Pointer[sandbox.History]

	mu      sync.Mutex
	gates   map[string]chan struct{}
	started chan string
}

func newScriptedEngine(rdb *redis.Client) *scriptedEngine {
	return &scriptedEngine{rdb: rdb, prefix: "faults:engine:", gates: map[string]chan struct{}{}, started: make(chan string, 16)}
}

type scriptedState struct {
	Counter int64 `json:"counter"`
	Version int64 `json:"version"`
}

func (e *scriptedEngine) gate(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[name]
	if g == nil {
		g = make(chan struct{})
		e.gates[name] = g
	}
	return g
}

func (e *scriptedEngine) release(name string) { close(e.gate(name)) }

// waitStarted waits until a run reached "block name".
func (e *scriptedEngine) waitStarted(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-e.started:
		if got != name {
			t.Fatalf("run blocked at %q, want %q", got, name)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no run reached block %s", name)
	}
}

func (e *scriptedEngine) load(ctx context.Context, key string) (scriptedState, bool, error) {
	var st scriptedState
	raw, err := e.rdb.Get(ctx, e.prefix+key).Bytes()
	if err == redis.Nil {
		return st, false, nil
	} else if err != nil {
		return st, false, sandchat.RedisError(err)
	}
	return st, true, json.Unmarshal(raw, &st)
}

func (e *scriptedEngine) Execute(ctx context.Context, key string, req sandbox.Request) (sandbox.Result, error) {
	st, found, err := e.load(ctx, key)
	if err != nil {
		return sandbox.Result{}, err
	}
	res := sandbox.Result{RunOutcome: sandchat.RunOutcome{Status: sandbox.StatusSuccess, Artifacts: []sandchat.Artifact{}}}
	res.Session.RestoredFrom = sandbox.FromLive
	if !found {
		res.Session.RestoredFrom = sandbox.FromFresh
		if h := e.history.Load(); h != nil {
			runs, err := (*h).SessionRuns(ctx, key)
			if err != nil {
				return sandbox.Result{}, err
			}
			var cells []string
			for _, r := range runs {
				if r.Status == sandbox.StatusSuccess {
					cells = append(cells, r.Code)
				}
			}
			for _, c := range cells {
				var discard sandbox.Result
				if err := e.apply(ctx, &st, c, &discard, nil); err != nil {
					return sandbox.Result{}, err
				}
			}
			if len(cells) > 0 {
				res.Session.RestoredFrom = sandbox.FromReplay
			}
		}
	}
	if err := e.apply(ctx, &st, req.Code, &res, req.OnOutput); err != nil {
		return sandbox.Result{}, err
	}
	if res.Status == sandbox.StatusSuccess {
		st.Version++
		raw, _ := json.Marshal(st)
		if err := e.rdb.Set(context.WithoutCancel(ctx), e.prefix+key, raw, time.Hour).Err(); err != nil {
			return sandbox.Result{}, sandchat.RedisError(err)
		}
	}
	res.Session.Version = st.Version
	res.Session.Packages = []string{}
	// What the real engine reports of the storage the run counts against.
	if res.Session.StateBytes, err = e.StateBytes(context.WithoutCancel(ctx), key); err != nil {
		return sandbox.Result{}, err
	}
	return res, nil
}

func (e *scriptedEngine) apply(ctx context.Context, st *scriptedState, code string, res *sandbox.Result, out func(stream, chunk string)) error {
	for _, line := range strings.Split(code, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "counter" && f[1] == "+=":
			n, _ := strconv.ParseInt(f[2], 10, 64)
			st.Counter += n
		case line == "print(counter)":
			res.Stdout += strconv.FormatInt(st.Counter, 10) + "\n"
		case line == "nul":
			res.Stdout += "a\x00b\n"
		case line == "raise nul":
			res.Status = sandbox.StatusError
			res.Error = &sandchat.RunError{Type: "ValueError", Message: "bad\x00byte", Traceback: "Traceback:\nValueError: bad\x00byte"}
			return nil
		case len(f) == 2 && f[0] == "big":
			n, _ := strconv.Atoi(f[1])
			chunk := strings.Repeat("y", 64<<10)
			for sent := 0; sent < n; sent += len(chunk) {
				c := chunk[:min(len(chunk), n-sent)]
				res.Stdout += c
				if out != nil {
					out("stdout", c)
				}
			}
		case len(f) == 2 && f[0] == "artifact":
			n, _ := strconv.Atoi(f[1])
			name := strings.Repeat("d", n-4) + ".csv"
			res.Artifacts = append(res.Artifacts, sandchat.Artifact{Name: name, ContentType: "text/csv", Data: []byte("a,b\n"), Size: 4})
		case len(f) == 2 && f[0] == "block":
			e.started <- f[1]
			select {
			case <-e.gate(f[1]):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (e *scriptedEngine) Session(ctx context.Context, key string) (sandbox.SessionInfo, error) {
	st, found, err := e.load(ctx, key)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return sandbox.SessionInfo{Version: st.Version, Live: found, Packages: []string{}}, nil
}

// StateBytes counts the scripted states' JSON, as the real engine counts what it stored.
func (e *scriptedEngine) StateBytes(ctx context.Context, keys ...string) (int64, error) {
	var total int64
	for _, key := range keys {
		n, err := e.rdb.StrLen(ctx, e.prefix+key).Result()
		if err != nil {
			return 0, sandchat.RedisError(err)
		}
		total += n
	}
	return total, nil
}

func (e *scriptedEngine) Reset(ctx context.Context, key string) error {
	return sandchat.RedisError(e.rdb.Del(ctx, e.prefix+key).Err())
}

// Forget: the scripted state is one key, so forgetting it is a reset.
func (e *scriptedEngine) Forget(ctx context.Context, key string) error { return e.Reset(ctx, key) }

// Config: the scripted engine takes what the real one takes.
func (e *scriptedEngine) Config() sandbox.Config { return sandbox.DefaultConfig() }

// Loadable: the scripted engine loads no packages.
func (e *scriptedEngine) Loadable(context.Context, string) bool { return false }

var _ toolkits.Engine = (*scriptedEngine)(nil)

// faultEnv is one Postgres cluster, one Redis and the scripted engine the fault cases
// share; each case restores the services it broke.
type faultEnv struct {
	t      *testing.T
	pg     *pgCluster
	redis  *redisServer
	engine *scriptedEngine
}

func newFaultEnv(t *testing.T) *faultEnv {
	pg := startPostgres(t)
	r := startRedis(t)
	return &faultEnv{t: t, pg: pg, redis: r, engine: newScriptedEngine(r.client(t))}
}

// node runs a real Main on the suite's services with the scripted engine behind the
// sandbox tool, and per-user rate limits on so that requests touch Redis.
func (f *faultEnv) node(t *testing.T, mutate ...func(*Config, *Main)) *Main {
	t.Helper()
	cfg := Config{
		Addr: "127.0.0.1:0", DatabaseURL: f.pg.URL(), RedisURL: f.redis.URL(), RedisPrefix: "faults:",
		EventRetention: 24 * time.Hour, ShutdownTimeout: 5 * time.Second, LogLevel: "info", LogFormat: "text",
		TurnStaleAfter: 30 * time.Second, LLM: LLMConfig{Provider: "builtin"},
		RateMessages: 100000, RateExecutions: 100000, WSQueueBytes: 4 << 20,
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelError})))
	m.Probes = map[string]toolkits.Probe{toolkits.PyodideSandbox: func() (bool, string) { return true, "" }}
	m.SandboxEngine = f.engine
	for _, fn := range mutate {
		fn(&m.Config, m)
	}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatalf("start node: %v", err)
	}
	var h sandbox.History = m.Store
	f.engine.history.Store(&h)
	t.Cleanup(func() { m.Close() })
	return m
}

// sandboxNode runs a node with the real engine, its sessions in the suite's Redis: a
// kill of Redis takes them as the crash of a cache node would.
func (f *faultEnv) sandboxNode(t *testing.T) *Main {
	t.Helper()
	m := f.node(t, withEngine("faults:"))
	awaitEngine(t, m)
	return m
}
