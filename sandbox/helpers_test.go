package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/redisstore"
)

// testRedis connects to TEST_REDIS_URL and fails the test, with how to start Redis,
// when it is unreachable.
func testRedis(t testing.TB) redis.UniversalClient { return testenv.RedisClient(t) }

func randomPrefix(name string) string {
	return testenv.Name("sandchat-test:"+strings.ToLower(name)+":") + ":"
}

// cleanPrefix deletes every key under prefix when the test ends.
func cleanPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Cleanup(func() { testenv.DropPrefix(rdb, prefix) })
}

type testLogWriter struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &testLogWriter{t: t, on: true}
	// t.Log after the test ends panics; engines may log while closing.
	t.Cleanup(func() { w.mu.Lock(); w.on = false; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// testConfig is small enough for a 2-core machine. It keeps no warm pool: an engine a
// test starts for a few sessions would boot processes nobody takes (a restore and its
// warm-up, ~1.5 s of CPU each). The shared engine and the benchmarks keep one.
func testConfig(prefix string) Config {
	c := DefaultConfig()
	c.WarmPool, c.WarmPoolMax, c.WarmSpares = 0, 0, 0
	c.MaxLive = 8
	c.Timeout = 20 * time.Second
	// Grace is the default (3 s): code that honours the interrupt must be scheduled within
	// it to keep its state. The server's own setting, SANDCHAT_SANDBOX_GRACE, stretches it
	// where scheduling is that slow: .ci/cgroup2 sets it for its one-CPU VM, a user-mode
	// kernel whose every context switch and page fault are host round trips, so that a
	// host busy with the rest of the suite stalls the guest for seconds.
	// SANDCHAT_SANDBOX_LEASE_TTL likewise: a guest that stands still longer than a lease
	// loses the runs it holds, as a paused server does.
	for env, d := range map[string]*time.Duration{"SANDCHAT_SANDBOX_GRACE": &c.Grace, "SANDCHAT_SANDBOX_LEASE_TTL": &c.LeaseTTL} {
		if v := os.Getenv(env); v != "" {
			g, err := time.ParseDuration(v)
			if err != nil {
				panic(fmt.Sprintf("%s: %v", env, err))
			}
			*d = g
		}
	}
	c.RedisPrefix = prefix
	c.QueueDepth = 32
	// Tests reach no internet: packages come from what they serve themselves.
	c.PackageCDN = CDNOff
	return Locate(c)
}

// pooledConfig is testConfig with a pool of one ready process and one spare: it does
// not grow with a test's burst of new sessions into processes nothing waits for.
func pooledConfig(prefix string) Config {
	c := testConfig(prefix)
	c.WarmPool, c.WarmPoolMax, c.WarmSpares = 1, 1, 1
	return c
}

// requireRuntime fails, never skips: a CI without the runtime must say how to fix it.
func requireRuntime(t testing.TB, cfg Config) {
	t.Helper()
	if err := checkRuntime(cfg); err != nil {
		t.Fatal(err)
	}
}

func checkRuntime(cfg Config) error {
	if c := Locate(cfg); c.DenoPath == "" || c.PyodideDir == "" || c.RuntimeDir == "" {
		return fmt.Errorf("Deno/Pyodide not installed (deno=%q pyodide=%q runtime=%q): run `npm ci --prefix sandbox/runtime`", c.DenoPath, c.PyodideDir, c.RuntimeDir)
	}
	return nil
}

// storeFor is the Redis store of an engine configured with cfg.
func storeFor(rdb redis.UniversalClient, cfg Config) Store {
	st, err := redisstore.New(rdb, cfg.RedisPrefix, cfg.SessionTTL)
	if err != nil {
		panic(err)
	}
	return st
}

// skey is the Redis key of one part of a session's state, for tests that look at
// or damage what the store keeps.
func skey(e *Engine, session, part string) string {
	return e.cfg.RedisPrefix + "sandbox:{" + session + "}:" + part
}

// bundle is what setup hands a test besides the engine.
type bundle struct {
	rdb    redis.UniversalClient
	prefix string
	cfg    Config
}

var (
	sharedOnce   sync.Once
	sharedEngine *Engine
	sharedBundle bundle
	sharedErr    string
)

// setup returns the package's shared engine (one Deno host, started once) and a key
// namespace for this test: tests that do not need special limits share it, which keeps
// the suite fast on two cores. Session keys are cleaned when the test ends.
//
// Which tests run in parallel: those that own their engine (newEngine) and their
// sessions call t.Parallel, so they run together once the tests that share this engine
// have run one after the other (some of those judge the whole engine: its processes,
// its CPU, its status). Most of a sandbox test's time is spent waiting on a process.
func setup(t *testing.T) (*Engine, bundle, func(name string) string) {
	t.Helper()
	sharedOnce.Do(func() {
		rdb := testRedis(t)
		prefix := randomPrefix("shared")
		cfg := pooledConfig(prefix)
		e, err := bootEngine(cfg, storeFor(rdb, cfg), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			sharedErr = err.Error()
			return
		}
		sharedEngine, sharedBundle = e, bundle{rdb: rdb, prefix: prefix, cfg: e.Config()}
	})
	if sharedErr != "" {
		t.Fatalf("shared sandbox engine: %s", sharedErr)
	}
	ns := randomPrefix(t.Name())
	keyOf := func(name string) string { return ns + name }
	cleanPrefix(t, sharedBundle.rdb, sharedBundle.prefix+"sandbox:{"+ns)
	return sharedEngine, sharedBundle, keyOf
}

// newEngine starts a separate engine for tests that need their own limits. It reuses
// the shared engine's base snapshot, copied under its own prefix, as a second node of
// the same build would, so it does not pay for a fresh Pyodide boot.
func newEngine(t *testing.T, mutate func(*Config)) (*Engine, bundle) {
	t.Helper()
	return newEngineOn(t, mutate, nil)
}

// newEngineOn is newEngine with the engine's store made by store (nil: Redis alone)
// and New's options.
func newEngineOn(t *testing.T, mutate func(*Config), store func(Config) Store, opts ...Option) (*Engine, bundle) {
	t.Helper()
	shared, sb, _ := setup(t)
	rdb := sb.rdb
	prefix := randomPrefix(t.Name())
	cleanPrefix(t, rdb, prefix)
	ctx := context.Background()
	for _, k := range []string{"build:" + shared.rt.build, "base:" + shared.procs.Base()} {
		if err := rdb.Copy(ctx, sb.prefix+"sandbox:"+k, prefix+"sandbox:"+k, 0, true).Err(); err != nil {
			t.Fatalf("copy base: %v", err)
		}
	}
	cfg := testConfig(prefix)
	if mutate != nil {
		mutate(&cfg)
	}
	st := storeFor(rdb, cfg)
	if store != nil {
		st = store(cfg)
	}
	e, err := bootEngine(cfg, st, testLogger(t), opts...)
	if e != nil {
		t.Cleanup(func() { _ = e.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return e, bundle{rdb: rdb, prefix: prefix, cfg: e.Config()}
}

func startEngine(t testing.TB, cfg Config, rdb redis.UniversalClient) *Engine {
	t.Helper()
	e, err := bootEngine(cfg, storeFor(rdb, cfg), testLogger(t))
	if e != nil {
		t.Cleanup(func() { _ = e.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// bootEngine is how every test starts an engine: it checks the runtime is installed,
// starts the engine within three minutes and requires it available. On an error after
// New the engine is returned too, for the caller to close.
func bootEngine(cfg Config, st Store, log *slog.Logger, opts ...Option) (*Engine, error) {
	if err := checkRuntime(cfg); err != nil {
		return nil, err
	}
	e, err := New(cfg, st, log, opts...)
	if err != nil {
		return nil, fmt.Errorf("New: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		return e, fmt.Errorf("Start: %w", err)
	}
	if ok, why := e.Available(); !ok {
		return e, fmt.Errorf("engine unavailable: %s", why)
	}
	return e, nil
}

func run(t *testing.T, e *Engine, key, code string) Result {
	t.Helper()
	res, err := e.Execute(context.Background(), key, Request{Code: code})
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return res
}

func mustSucceed(t *testing.T, e *Engine, key, code string) Result {
	t.Helper()
	res := run(t, e, key, code)
	if res.Status != StatusSuccess {
		t.Fatalf("Execute(%q): status %s, error %+v, stderr %q", code, res.Status, res.Error, res.Stderr)
	}
	return res
}

func resultOf(r Result) string {
	if r.Result == nil {
		return "<nil>"
	}
	return *r.Result
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEngine != nil {
		_ = sharedEngine.Close()
		testenv.DropPrefix(sharedBundle.rdb, sharedBundle.prefix)
	}
	os.Exit(code)
}
