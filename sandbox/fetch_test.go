package sandbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// cdnFixture is a local package CDN: a lock file (in a package dir without wheels)
// listing three test packages, and an HTTP server on 127.0.0.1 serving their wheels.
type cdnFixture struct {
	lockDir string
	srv     *httptest.Server
	hitCounter
}

func newCDN(t testing.TB, pyodideDir string) *cdnFixture {
	t.Helper()
	specs := []testWheel{
		{name: "sandchat_cdn", version: "1.0", depends: []string{"sandchat-dep"}, files: map[string]string{
			"sandchat_cdn/__init__.py": "from sandchat_dep import twice\ndef hello():\n    return twice('hi from the cdn')\n"}},
		{name: "sandchat_dep", version: "1.0", files: map[string]string{
			"sandchat_dep/__init__.py": "def twice(s):\n    return s + ', ' + s\n"}},
		{name: "sandchat_bad", version: "1.0", files: map[string]string{
			"sandchat_bad/__init__.py": "X = 1\n"}},
	}
	// The CDN serves something else than the lock names for sandchat-bad.
	return serveCDN(t, pyodideDir, specs, map[string]string{"sandchat-bad": strings.Repeat("0", 64)})
}

// serveCDN builds the wheels of specs, lists them in a lock file (with the sha256 of
// sums where given) and serves them on 127.0.0.1.
func serveCDN(t testing.TB, pyodideDir string, specs []testWheel, sums map[string]string) *cdnFixture {
	t.Helper()
	wheels := map[string][]byte{}
	for _, w := range specs {
		if len(w.files) > 0 {
			wheels[w.fileName()] = w.build(t)
		}
	}
	dir := readableTempDir(t)
	writeLock(t, pyodideDir, dir, wheels, specs, sums)
	c := &cdnFixture{lockDir: dir}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/pyodide/")
		c.hit(name)
		if b, ok := wheels[name]; ok {
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestPackageFetch: wheels come from a CDN through the engine, never the session:
// fetched once, verified against the lock, cached on disk across restarts; a wrong hash
// is refused and an unreachable CDN gives a clear message.
func TestPackageFetch(t *testing.T) {
	t.Parallel()
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
		t.Fatalf("first import: %s, %d requests (%v)", resultOf(r), cdn.requests(), cdn.String())
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
		cache := readableTempDir(t)
		e3, _ := newEngine(t, withCDN(deadURL(t), cache))
		r := run(t, e3, "offline", code)
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" {
			t.Fatalf("status %s stderr %q error %+v", r.Status, r.Stderr, r.Error)
		}
		// One short line, once, in what Python, the model and the user see: what is
		// missing, that this server cannot fetch packages, whom to ask. The source and
		// the settings that fix it are the operator's (the server's log).
		want := "No module named 'sandchat_cdn': " + pkgs.UnservedLine
		if r.Error.Message != want || strings.Count(r.Error.Traceback, pkgs.UnservedLine) != 1 || r.Stderr != "" {
			t.Errorf("error %q, stderr %q; want the error %q and nothing else", r.Error.Message, r.Stderr, want)
		}
		seen := r.Stderr + r.Error.Message + r.Error.Traceback
		for _, leak := range []string{cdn.lockDir, cache, "127.0.0.1", "node_modules", ".whl", "http", "connect", "dial", "ENOENT", "SANDCHAT_"} {
			if strings.Contains(seen, leak) {
				t.Errorf("%q shows to the user: %q", leak, seen)
			}
		}
	})
}

// TestLoadOutsideTheTimeLimit: a run's time limit starts with its code. Fetching the
// packages it imports (shown live as progress) and loading them into the interpreter
// have their own bound.
func TestLoadOutsideTheTimeLimit(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	// 48 MB of bytes that do not compress: Pyodide takes a while to unpack and load it.
	big := make([]byte, 48<<20)
	_, _ = rand.Read(big)
	cdn := serveCDN(t, shared.cfg.PyodideDir, []testWheel{{name: "sandchat_big", version: "1.0", files: map[string]string{
		"sandchat_big/__init__.py": "import os\nSIZE = os.path.getsize(os.path.join(os.path.dirname(__file__), 'blob.bin'))\n",
		"sandchat_big/blob.bin":    string(big),
	}}}, nil)
	e, _ := newEngine(t, func(c *Config) {
		c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(t)
	})
	mustSucceed(t, e, "big", "None")
	var mu sync.Mutex
	var live strings.Builder
	r, err := e.Execute(context.Background(), "big", Request{Code: "import sandchat_big\nsandchat_big.SIZE", Timeout: 300 * time.Millisecond,
		OnOutput: func(_, chunk string) { mu.Lock(); live.WriteString(chunk); mu.Unlock() }})
	if err != nil || r.Status != StatusSuccess || resultOf(r) != fmt.Sprint(len(big)) {
		t.Fatalf("a 300 ms run importing a 48 MB package: %v %s %s %+v", err, r.Status, resultOf(r), r.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(live.String(), "[sandbox] fetching the package sandchat-big") {
		t.Fatalf("live output %q shows no fetch progress", live.String())
	}
	// The code itself still has its limit.
	r, err = e.Execute(context.Background(), "big", Request{Code: "while True: pass", Timeout: 300 * time.Millisecond})
	if err != nil || r.Status != StatusTimeout {
		t.Fatalf("code past its limit: %v %s", err, r.Status)
	}
}

// deadURL is a package source nobody answers at: the port was free a moment ago.
func deadURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String() + "/pyodide/"
}

// TestProvidedModules: the modules the driver provides (sandchat's micropip, the
// IPython.display shim) need no package of the distribution, whose lock file names
// packages for both. On a server that cannot reach its package source,
// `from IPython.display import HTML, display` runs, draws its item, and says nothing
// about packages: nothing was fetched, nothing loaded. The engine's list is the
// driver's.
func TestProvidedModules(t *testing.T) {
	shared, _, _ := setup(t)
	src, err := os.ReadFile(filepath.Join(shared.cfg.RuntimeDir, "driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\s*_m\.provided = \(([^)]*)\)$`).FindSubmatch(src)
	if line == nil {
		t.Fatal("driver.py sets no _m.provided")
	}
	var driver []string
	for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(line[1], -1) {
		driver = append(driver, string(m[1]))
	}
	if !slices.Equal(driver, pkgs.Provided) {
		t.Errorf("the driver provides %q, the engine skips %q", driver, pkgs.Provided)
	}

	e, _ := newEngine(t, func(c *Config) { c.PackageCDN, c.PackageCacheDir = deadURL(t), readableTempDir(t) })
	for _, code := range []string{
		"from IPython.display import HTML, display\ndisplay(HTML('<b>shim</b>'))",
		"import IPython.display\nIPython.display.display(IPython.display.Markdown('*md*'))",
		"import micropip\nprint(sorted(micropip.list()))",
	} {
		r := mustSucceed(t, e, "provided", code)
		if r.Stderr != "" || len(r.Session.Packages) != 0 {
			t.Errorf("%q: stderr %q, packages loaded %q; want neither", code, r.Stderr, r.Session.Packages)
		}
		if !strings.Contains(code, "micropip") && len(r.Displays) != 1 {
			t.Errorf("%q: %d display items, want 1", code, len(r.Displays))
		}
	}
	if n := e.fetch.Requests(); n != 0 {
		t.Errorf("%d requests to the package source for modules the driver provides", n)
	}
}
