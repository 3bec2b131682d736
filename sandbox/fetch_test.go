package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cdnFixture is a local package CDN: a lock file (in a package dir without wheels)
// listing three test packages, and an HTTP server on 127.0.0.1 serving their wheels.
type cdnFixture struct {
	lockDir string
	srv     *httptest.Server
	mu      sync.Mutex
	hits    map[string]int
}

func (c *cdnFixture) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.hits {
		n += v
	}
	return n
}

func newCDN(t *testing.T, pyodideDir string) *cdnFixture {
	t.Helper()
	wheels := map[string][]byte{
		"sandchat_cdn-1.0-py3-none-any.whl": buildWheel(t, "sandchat_cdn", "1.0", map[string]string{
			"sandchat_cdn/__init__.py": "from sandchat_dep import twice\ndef hello():\n    return twice('hi from the cdn')\n"}),
		"sandchat_dep-1.0-py3-none-any.whl": buildWheel(t, "sandchat_dep", "1.0", map[string]string{
			"sandchat_dep/__init__.py": "def twice(s):\n    return s + ', ' + s\n"}),
		"sandchat_bad-1.0-py3-none-any.whl": buildWheel(t, "sandchat_bad", "1.0", map[string]string{
			"sandchat_bad/__init__.py": "X = 1\n"}),
	}
	raw, err := os.ReadFile(filepath.Join(pyodideDir, "pyodide-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock map[string]any
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatal(err)
	}
	entry := func(name, file string, sum string, deps []string) {
		lock["packages"].(map[string]any)[name] = map[string]any{
			"name": name, "version": "1.0", "file_name": file, "install_dir": "site", "sha256": sum,
			"package_type": "package", "imports": []string{strings.ReplaceAll(name, "-", "_")}, "depends": deps, "unvendored_tests": false,
		}
	}
	for file, w := range wheels {
		sum := sha256.Sum256(w)
		name := strings.ReplaceAll(strings.SplitN(file, "-", 2)[0], "_", "-")
		hash := hex.EncodeToString(sum[:])
		deps := []string{}
		if name == "sandchat-bad" {
			hash = strings.Repeat("0", 64) // the CDN serves something else than the lock names
		}
		if name == "sandchat-cdn" {
			deps = []string{"sandchat-dep"}
		}
		entry(name, file, hash, deps)
	}
	dir := readableTempDir(t)
	out, _ := json.Marshal(lock)
	if err := os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cdnFixture{lockDir: dir, hits: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/pyodide/")
		c.mu.Lock()
		c.hits[name]++
		c.mu.Unlock()
		if b, ok := wheels[name]; ok {
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func readableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// Session processes run as an unprivileged user: the directory must be readable to it.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPackageFetch: wheels come from a CDN through the engine, never the session:
// fetched once, verified against the lock, cached on disk across restarts; a wrong hash
// is refused and an unreachable CDN gives a clear message.
func TestPackageFetch(t *testing.T) {
	shared, _, _ := setup(t)
	cdn := newCDN(t, shared.cfg.PyodideDir)
	cache := readableTempDir(t)
	withCDN := func(url, cacheDir string) func(*Config) {
		return func(c *Config) { c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, url, cacheDir }
	}
	e, _ := newEngine(t, withCDN(cdn.srv.URL+"/pyodide/", cache))
	code := "import sandchat_cdn\nsandchat_cdn.hello()"
	want := "'hi from the cdn, hi from the cdn'"

	// Both sessions exist before the clock starts: what is timed is the import alone.
	mustSucceed(t, e, "first", "None")
	mustSucceed(t, e, "second", "None")
	t0 := time.Now()
	r := mustSucceed(t, e, "first", code)
	first := time.Since(t0)
	if resultOf(r) != want || cdn.requests() != 2 {
		t.Fatalf("first import: %s, %d requests (%v)", resultOf(r), cdn.requests(), cdn.hits)
	}
	t0 = time.Now()
	r = mustSucceed(t, e, "second", code)
	cached := time.Since(t0)
	if resultOf(r) != want || cdn.requests() != 2 {
		t.Fatalf("cached import: %s, %d requests", resultOf(r), cdn.requests())
	}
	t.Logf("warm session importing a package with one dependency (2 wheels): first (fetch + verify + load) %v, from the cache %v", first, cached)

	t.Run("a wheel whose hash differs from the lock is refused", func(t *testing.T) {
		r := run(t, e, "bad", "import sandchat_bad")
		if r.Status != StatusError || !strings.Contains(r.Stderr, "refused: its sha256") {
			t.Fatalf("status %s stderr %q error %+v", r.Status, r.Stderr, r.Error)
		}
		if fileExists(filepath.Join(cache, "sandchat_bad-1.0-py3-none-any.whl")) {
			t.Fatal("the refused wheel is in the cache")
		}
	})
	t.Run("a restart keeps the cache", func(t *testing.T) {
		before := cdn.requests()
		e2, _ := newEngine(t, withCDN(cdn.srv.URL+"/pyodide/", cache))
		if r := mustSucceed(t, e2, "restart", code); resultOf(r) != want || cdn.requests() != before {
			t.Fatalf("%s, %d new requests", resultOf(r), cdn.requests()-before)
		}
	})
	t.Run("offline gives a clear message", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String() + "/pyodide/"
		l.Close()
		e3, _ := newEngine(t, withCDN(dead, readableTempDir(t)))
		r := run(t, e3, "offline", code)
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" || !strings.Contains(r.Stderr, "is unreachable") {
			t.Fatalf("status %s stderr %q error %+v", r.Status, r.Stderr, r.Error)
		}
		if strings.Contains(r.Stderr+r.Error.Message, cdn.lockDir) {
			t.Errorf("server paths in the message: %q", r.Stderr)
		}
	})
}
