package sandbox

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchEngineWith is benchEngine with its own settings.
func benchEngineWith(b *testing.B, mutate func(*Config)) *Engine {
	b.Helper()
	rdb := testRedis(b)
	prefix := randomPrefix("bench")
	cleanPrefix(b, rdb, prefix)
	cfg := pooledConfig(prefix)
	requireRuntime(b, cfg)
	// A pool that grows with the demand of earlier iterations would start processes
	// beside later ones: the sub-benchmarks would not compare like with like.
	cfg.WarmPoolMax = cfg.WarmPool
	mutate(&cfg)
	e, err := New(cfg, storeFor(rdb, cfg), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if ok, why := e.Available(); !ok {
		b.Fatal(why)
	}
	return e
}

// BenchmarkPackageImport: a new session's first import of a package with one dependency
// (two wheels) through the local CDN, fetched and verified by the engine, against the
// same import served from the package cache. Each iteration is a new session from the
// warm pool; what is timed is the run with the import.
//
//	go test ./sandbox -run '^$' -bench PackageImport -benchtime 5x
func BenchmarkPackageImport(b *testing.B) {
	cdn := newCDN(b, Locate(DefaultConfig()).PyodideDir)
	e := benchEngineWith(b, func(c *Config) {
		c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(b)
	})
	code := "import sandchat_cdn\nsandchat_cdn.hello()"
	for _, fetch := range []bool{false, true} {
		name := map[bool]string{true: "fetch", false: "cached"}[fetch]
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				key := fmt.Sprintf("import-%s-%d", name, i)
				benchRun(b, e, key, "None")
				if fetch {
					e.fetch.ForgetCache()
				}
				b.StartTimer()
				benchRun(b, e, key, code)
				b.StopTimer()
				// Sessions left live would pile up and crowd the machine's memory.
				if err := e.Reset(context.Background(), key); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkPackageRestore: bringing back from Redis, in a new process, a session that
// loaded a package of the Pyodide distribution (a pure-Python wheel loaded with
// loadPackage; a wheel with a real emscripten extension cannot be built offline) and ran
// three cells: by replay (how sessions with compiled extensions persist: the packages are
// loaded again, then the cells run again) against a heap snapshot. Timed: the run that
// follows an eviction, restore included.
//
//	go test ./sandbox -run '^$' -bench PackageRestore -benchtime 5x
func BenchmarkPackageRestore(b *testing.B) {
	mirror := packageMirror(b, Locate(DefaultConfig()).PyodideDir)
	for _, replay := range []bool{true, false} {
		name := map[bool]string{true: "replay", false: "snapshot"}[replay]
		b.Run(name, func(b *testing.B) {
			e := benchEngineWith(b, func(c *Config) { c.PackageDir, c.ForceReplay = mirror, replay })
			benchRun(b, e, "restore", "import sandchat_demo")
			benchRun(b, e, "restore", "data = [sandchat_demo.greet(str(i)) for i in range(1000)]")
			benchRun(b, e, "restore", "total = sum(len(s) for s in data)")
			for b.Loop() {
				b.StopTimer()
				evictLive(b, e, "restore")
				b.StartTimer()
				r := benchRun(b, e, "restore", "total")
				if r.Session.RestoredFrom != name {
					b.Fatalf("restored from %s", r.Session.RestoredFrom)
				}
			}
		})
	}
}

// BenchmarkPreload: a new session's first import of a package with one dependency, with
// the package in Config.Preload (in the base snapshot) and without (loaded from the
// package cache, no fetch). state-B/op is the session's saved heap delta after the run.
//
//	go test ./sandbox -run '^$' -bench Preload -benchtime 5x
func BenchmarkPreload(b *testing.B) {
	cdn := newCDN(b, Locate(DefaultConfig()).PyodideDir)
	cache := readableTempDir(b)
	for _, preload := range []bool{false, true} {
		name := map[bool]string{true: "preloaded", false: "cached"}[preload]
		b.Run(name, func(b *testing.B) {
			e := benchEngineWith(b, func(c *Config) {
				c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", cache
				if preload {
					c.Preload = []string{"sandchat_cdn"}
				}
			})
			var state int64
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				key := fmt.Sprintf("preload-%d", i)
				benchRun(b, e, key, "None")
				b.StartTimer()
				r := benchRun(b, e, key, "import sandchat_cdn\nsandchat_cdn.hello()")
				state = r.Session.StateBytes
				b.StopTimer()
				if err := e.Reset(context.Background(), key); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(state), "state-B/op")
		})
	}
}
