package sandbox

import (
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// bigWheels are n packages of 6 MiB each (incompressible), served by a local CDN.
func bigWheels(t *testing.T, pyodideDir string, n int) *cdnFixture {
	var specs []testWheel
	for i := range n {
		blob := make([]byte, 6<<20)
		_, _ = rand.Read(blob)
		name := fmt.Sprintf("sandchat_big%d", i)
		specs = append(specs, testWheel{name: name, version: "1.0", files: map[string]string{
			name + "/__init__.py": "", name + "/blob.bin": string(blob)}})
	}
	return serveCDN(t, pyodideDir, specs, nil)
}

// watchCache records the most the cache held while f runs.
func watchCache(e *Engine, f func()) int64 {
	var high int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			high = max(high, e.fetch.CacheBytes())
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	return high
}

// TestCacheBoundRun: the cache bound holds while a run is in flight, and a run and a
// session may only take so much from the cache.
func TestCacheBoundRun(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	cdn := bigWheels(t, shared.cfg.PyodideDir, 4)
	withBig := func(more func(*Config)) func(*Config) {
		return func(c *Config) {
			c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(t)
			more(c)
		}
	}
	e, _ := newEngine(t, withBig(func(c *Config) { c.PackageCacheMaxBytes = 16 << 20 }))
	mustSucceed(t, e, "bound", "None")
	var r Result
	high := watchCache(e, func() {
		r = run(t, e, "bound", "import sandchat_big0, sandchat_big1, sandchat_big2, sandchat_big3")
	})
	if high > 16<<20 {
		t.Errorf("the cache held %d MiB during the run, over its 16 MiB bound", high>>20)
	}
	if !strings.Contains(r.Stderr, "PackageCacheMaxBytes") || !strings.Contains(r.Stderr, "SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX") {
		t.Errorf("stderr %q", r.Stderr)
	}

	t.Run("a run and a session take at most their bounds", func(t *testing.T) {
		e, _ := newEngine(t, withBig(func(c *Config) {
			c.PackageCacheMaxBytes, c.PackageRunMaxFiles, c.PackageSessionMaxFiles = 64<<20, 1, 2
		}))
		r := run(t, e, "s", "import sandchat_big0, sandchat_big1")
		if !strings.Contains(r.Stderr, "PackageRunMaxFiles") || !strings.Contains(r.Stderr, "SANDCHAT_SANDBOX_PACKAGE_RUN_MAX_FILES") {
			t.Fatalf("run bound: stderr %q", r.Stderr)
		}
		mustSucceed(t, e, "s", "import sandchat_big1")
		r = run(t, e, "s", "import sandchat_big2")
		if r.Status != StatusError || !strings.Contains(r.Stderr, "PackageSessionMaxFiles") {
			t.Fatalf("session bound: %s, stderr %q", r.Status, r.Stderr)
		}
		mustSucceed(t, e, "other", "import sandchat_big2")
	})
}

// TestPackageFetchAmplification: only real import statements cause fetches, and a run,
// a session and an install cause at most their bounds of downloads.
func TestPackageFetchAmplification(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	var specs []testWheel
	var imports, names strings.Builder
	for i := range 300 {
		name := fmt.Sprintf("sandchat_m%d", i)
		specs = append(specs, testWheel{name: name, version: "1.0"})
		fmt.Fprintf(&imports, "    import %s\n", name)
		fmt.Fprintf(&names, "import %s\n", name)
	}
	cdn := serveCDN(t, shared.cfg.PyodideDir, specs, nil)
	idx := newPipIndex(t)
	e, _ := newEngine(t, withPip(idx, readableTempDir(t), func(c *Config) {
		c.PackageDir, c.PackageCDN = cdn.lockDir, cdn.srv.URL+"/pyodide/"
		c.PackageRunMaxFetches, c.PipMaxIndexRequests = 15, 10
	}))

	r := mustSucceed(t, e, "amp", "s = '''\n"+names.String()+"'''\n# import sandchat_m1\nx = \"import sandchat_m2\"\nlen(s)")
	if n := cdn.requests(); n != 0 {
		t.Errorf("names in a string and a comment made %d requests (stderr %.200q)", n, r.Stderr)
	}
	before := cdn.requests()
	r = run(t, e, "amp", "if False:\n"+imports.String())
	if n := cdn.requests() - before; n > 15 || !strings.Contains(r.Stderr, "PackageRunMaxFetches") || !strings.Contains(r.Stderr, "SANDCHAT_SANDBOX_PACKAGE_RUN_MAX_FETCHES") {
		t.Errorf("300 imports made %d requests; stderr %.300q", n, r.Stderr)
	}

	t.Run("installs of unknown names are bounded", func(t *testing.T) {
		r := mustSucceed(t, e, "pip", `import micropip
errs = []
for k in range(3):
    try:
        await micropip.install([f'sandchat-nope{k}-{i}' for i in range(64)], keep_going=True)
    except ValueError as e:
        errs.append(str(e))
errs`)
		out := resultOf(r)
		if n := idx.requests(); n > 15 || !strings.Contains(out, "PipMaxIndexRequests") || !strings.Contains(out, "PackageRunMaxFetches") {
			t.Fatalf("%d index requests: %v; %.600s", n, idx.String(), out)
		}
	})
}
