package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRedis connects to TEST_REDIS_URL and fails the test, with how to start Redis,
// when it is unreachable.
func testRedis(t testing.TB) redis.UniversalClient {
	t.Helper()
	u := os.Getenv("TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s is unreachable (%v): start it with `redis-server --daemonize yes` or set TEST_REDIS_URL", u, err)
	}
	return rdb
}

func randomPrefix(name string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sandchat-test:" + strings.ToLower(name) + ":" + hex.EncodeToString(b) + ":"
}

// cleanPrefix deletes every key under prefix when the test ends.
func cleanPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Cleanup(func() { dropPrefix(context.Background(), rdb, prefix) })
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

// testConfig is small enough for a 2-core machine.
func testConfig(prefix string) Config {
	c := DefaultConfig()
	c.WarmPool = 1
	c.MaxLive = 8
	c.Timeout = 20 * time.Second
	c.Grace = time.Second
	c.RedisPrefix = prefix
	c.QueueDepth = 32
	return Locate(c)
}

// requireRuntime fails, never skips: a CI without the runtime must say how to fix it.
func requireRuntime(t testing.TB, cfg Config) {
	t.Helper()
	if cfg.DenoPath == "" || cfg.PyodideDir == "" || cfg.RuntimeDir == "" {
		t.Fatalf("Deno/Pyodide not installed (deno=%q pyodide=%q runtime=%q): run `npm ci --prefix sandbox/runtime`", cfg.DenoPath, cfg.PyodideDir, cfg.RuntimeDir)
	}
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
func setup(t *testing.T) (*Engine, bundle, func(name string) string) {
	t.Helper()
	sharedOnce.Do(func() {
		rdb := testRedis(t)
		prefix := randomPrefix("shared")
		cfg := testConfig(prefix)
		if cfg.DenoPath == "" || cfg.PyodideDir == "" {
			sharedErr = "Deno/Pyodide not installed: run `npm ci --prefix sandbox/runtime`"
			return
		}
		e, err := New(cfg, rdb, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			sharedErr = err.Error()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := e.Start(ctx); err != nil {
			sharedErr = err.Error()
			return
		}
		if ok, why := e.Available(); !ok {
			sharedErr = why
			return
		}
		sharedEngine, sharedBundle = e, bundle{rdb: rdb, prefix: prefix, cfg: e.Config()}
	})
	if sharedErr != "" {
		t.Fatalf("shared sandbox engine: %s", sharedErr)
	}
	ns := randomPrefix(t.Name())
	keyOf := func(name string) string { return ns + name }
	t.Cleanup(func() {
		ctx := context.Background()
		iter := sharedBundle.rdb.Scan(ctx, 0, sharedBundle.prefix+"sandbox:{"+ns+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			sharedBundle.rdb.Del(ctx, keys...)
		}
	})
	return sharedEngine, sharedBundle, keyOf
}

// newEngine starts a separate engine for tests that need their own limits. It reuses
// the shared engine's base snapshot, copied under its own prefix, as a second node of
// the same build would, so it does not pay for a fresh Pyodide boot.
func newEngine(t *testing.T, mutate func(*Config)) (*Engine, bundle) {
	t.Helper()
	shared, sb, _ := setup(t)
	rdb := sb.rdb
	prefix := randomPrefix(t.Name())
	cleanPrefix(t, rdb, prefix)
	ctx := context.Background()
	for _, k := range []string{"build:" + shared.rt.build, "base:" + shared.rt.baseHash} {
		if err := rdb.Copy(ctx, sb.prefix+"sandbox:"+k, prefix+"sandbox:"+k, 0, true).Err(); err != nil {
			t.Fatalf("copy base: %v", err)
		}
	}
	cfg := testConfig(prefix)
	if mutate != nil {
		mutate(&cfg)
	}
	e := startEngine(t, cfg, rdb)
	return e, bundle{rdb: rdb, prefix: prefix, cfg: e.Config()}
}

func startEngine(t *testing.T, cfg Config, rdb redis.UniversalClient) *Engine {
	t.Helper()
	requireRuntime(t, Locate(cfg))
	e, err := New(cfg, rdb, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if ok, why := e.Available(); !ok {
		t.Fatalf("engine unavailable: %s", why)
	}
	return e
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
		ctx := context.Background()
		iter := sharedBundle.rdb.Scan(ctx, 0, sharedBundle.prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			sharedBundle.rdb.Del(ctx, keys...)
		}
	}
	os.Exit(code)
}
