package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// pipIndex is a local PyPI: its JSON API under /pypi/ and the wheels under /files/.
type pipIndex struct {
	srv *httptest.Server
	hitCounter
}

func (p *pipIndex) url() string { return p.srv.URL + "/pypi/" }

// newPipIndex serves: sandchat-pipmain (needs sandchat-pipdep; two more requirements
// that do not apply to Pyodide), sandchat-pipdep, sandchat-pipbad (the index's sha256
// is wrong), sandchat-compiled (only a CPython extension wheel) and
// sandchat-pipbig (a wheel over an install's byte limit in one test).
func newPipIndex(t *testing.T) *pipIndex {
	t.Helper()
	specs := []testWheel{
		{name: "sandchat_pipmain", version: "2.0", requires: []string{"sandchat-pipdep>=1.0", "sandchat-never; extra == 'test'", "sandchat-never ; sys_platform == 'win32'"},
			files: map[string]string{"sandchat_pipmain/__init__.py": "from sandchat_pipdep import shout\ndef hello():\n    return shout('hi from pip')\n"}},
		{name: "sandchat_pipdep", version: "1.1", files: map[string]string{
			"sandchat_pipdep/__init__.py": "def shout(s):\n    return s.upper() + '!'\n"}},
		{name: "sandchat_pipbad", version: "1.0", files: map[string]string{"sandchat_pipbad/__init__.py": "X = 1\n"}},
		{name: "sandchat_compiled", version: "1.0", tag: "cp314-cp314-pyodide_2026_0_wasm32", files: map[string]string{"sandchat_compiled/__init__.py": ""}},
	}
	p := &pipIndex{}
	wheels := map[string][]byte{}
	docs := map[string][]byte{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hit(r.URL.Path)
		if b, ok := wheels[strings.TrimPrefix(r.URL.Path, "/files/")]; ok {
			_, _ = w.Write(b)
			return
		}
		if b, ok := docs[r.URL.Path]; ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(p.srv.Close)
	for _, s := range specs {
		b := s.build(t)
		wheels[s.fileName()] = b
		sum := sha256Hex(b)
		if s.name == "sandchat_pipbad" {
			sum = strings.Repeat("ab", 32)
		}
		file := map[string]any{"filename": s.fileName(), "url": p.srv.URL + "/files/" + s.fileName(),
			"digests": map[string]string{"sha256": sum}, "packagetype": "bdist_wheel", "size": len(b), "yanked": false}
		doc := map[string]any{
			"info":     map[string]any{"name": strings.ReplaceAll(s.name, "_", "-"), "version": s.version, "requires_dist": s.requires},
			"urls":     []any{file},
			"releases": map[string]any{s.version: []any{file}, "0.1": []any{}},
		}
		raw, _ := json.Marshal(doc)
		docs["/pypi/"+strings.ReplaceAll(s.name, "_", "-")+"/json"] = raw
	}
	return p
}

func withPip(idx *pipIndex, cache string, more ...func(*Config)) func(*Config) {
	return func(c *Config) {
		c.PipIndex, c.PipHosts, c.PackageCacheDir = idx.url(), nil, cache
		for _, m := range more {
			m(c)
		}
	}
}

const pipInstallMain = "import micropip\nawait micropip.install('sandchat-pipmain')\nimport sandchat_pipmain\nsandchat_pipmain.hello()"

// TestPip: micropip.install in a session is served by the engine from a package index,
// verified and cached; the session keeps no network.
func TestPip(t *testing.T) {
	idx := newPipIndex(t)
	cache := readableTempDir(t)
	e, _ := newEngine(t, withPip(idx, cache))
	want := "'HI FROM PIP!'"

	r := mustSucceed(t, e, "main", pipInstallMain)
	if resultOf(r) != want {
		t.Fatalf("got %s", resultOf(r))
	}
	// Two index documents and two wheels; the requirements for other platforms and extras were skipped.
	if n := idx.requests(); n != 4 {
		t.Fatalf("%d requests: %v", n, idx.String())
	}

	t.Run("a second session installs from the cache with no request", func(t *testing.T) {
		before := idx.requests()
		if r := mustSucceed(t, e, "second", pipInstallMain); resultOf(r) != want {
			t.Fatalf("got %s", resultOf(r))
		}
		if n := idx.requests() - before; n != 0 {
			t.Fatalf("%d requests: %v", n, idx.String())
		}
	})
	t.Run("list shows what micropip installed", func(t *testing.T) {
		r := mustSucceed(t, e, "main", "import micropip\nsorted(k for k, v in micropip.list().items() if v.source == 'pip')")
		if resultOf(r) != "['sandchat-pipdep', 'sandchat-pipmain']" {
			t.Fatalf("got %s", resultOf(r))
		}
	})
	t.Run("the installed package survives a restore from Redis in a new process", func(t *testing.T) {
		evictLive(t, e, "main")
		r := mustSucceed(t, e, "main", "import importlib, sandchat_pipdep, sandchat_pipmain\nimportlib.reload(sandchat_pipdep)\nimportlib.reload(sandchat_pipmain).hello()")
		if resultOf(r) != want || r.Session.RestoredFrom != FromSnapshot {
			t.Fatalf("got %s from %s (stderr %q)", resultOf(r), r.Session.RestoredFrom, r.Stderr)
		}
	})
	t.Run("a wheel whose sha256 differs from the index's is refused and not cached", func(t *testing.T) {
		r := run(t, e, "bad", "import micropip\nawait micropip.install('sandchat-pipbad')")
		if r.Status != StatusError || r.Error.Type != "ValueError" || !strings.Contains(r.Error.Message, "does not match the index's") {
			t.Fatalf("status %s error %+v", r.Status, r.Error)
		}
		found, _ := filepath.Glob(filepath.Join(cache, "pip", "*", "sandchat_pipbad*"))
		if len(found) > 0 {
			t.Fatalf("refused wheel cached: %v", found)
		}
	})
	t.Run("a package with only compiled wheels is refused with where to get it", func(t *testing.T) {
		r := run(t, e, "compiled", "import micropip\nawait micropip.install('sandchat-compiled')")
		if r.Status != StatusError || !strings.Contains(r.Error.Message, "no pure-Python wheel for sandchat-compiled") ||
			!strings.Contains(r.Error.Message, "compiled packages come from the Pyodide distribution") {
			t.Fatalf("status %s error %+v", r.Status, r.Error)
		}
	})
	t.Run("the session itself still has no network", func(t *testing.T) {
		r := run(t, e, "net", "from js import fetch\nawait fetch('"+idx.url()+"sandchat-pipdep/json')")
		if r.Status != StatusError {
			t.Fatalf("the session reached the index itself: %s", resultOf(r))
		}
	})
}

// TestPipReplay: a session persisted by replay gets its installs back before its cells.
func TestPipReplay(t *testing.T) {
	idx := newPipIndex(t)
	e, _ := newEngine(t, withPip(idx, readableTempDir(t), func(c *Config) { c.ForceReplay = true }))
	mustSucceed(t, e, "replay", pipInstallMain)
	before := idx.requests()
	evictLive(t, e, "replay")
	r := mustSucceed(t, e, "replay", "import sandchat_pipmain\nsandchat_pipmain.hello()")
	if resultOf(r) != "'HI FROM PIP!'" || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("got %s from %s (stderr %q)", resultOf(r), r.Session.RestoredFrom, r.Stderr)
	}
	if n := idx.requests() - before; n != 0 {
		t.Fatalf("replay asked the index %d times", n)
	}
}

// TestPipRefused: the allowlist and the off switch give a clear message.
func TestPipRefused(t *testing.T) {
	idx := newPipIndex(t)
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"a dependency not on the allowlist", func(c *Config) { c.PipAllow = []string{"sandchat_pipmain"} }, "sandchat-pipdep is not on this sandbox's list of installable packages"},
		{"pip turned off", func(c *Config) { c.PipOff = true }, "installing packages is turned off in this sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, withPip(idx, readableTempDir(t), tt.mutate))
			before := idx.requests()
			r := run(t, e, "refused", pipInstallMain)
			if r.Status != StatusError || r.Error.Type != "ValueError" || !strings.Contains(r.Error.Message, tt.want) {
				t.Fatalf("status %s error %+v", r.Status, r.Error)
			}
			if e.Config().PipOff && idx.requests() != before {
				t.Fatalf("pip off still asked the index")
			}
		})
	}
}

// TestPipResolve covers the resolver's parts that need no session.
func TestPipResolve(t *testing.T) {
	env := (&packageFetcher{python: "3.14.2"}).markerEnv()
	markers := map[string]bool{
		"extra == 'test'":                                                  false,
		"sys_platform == 'win32'":                                          false,
		"sys_platform == 'emscripten'":                                     true,
		"python_version >= '3.8'":                                          true,
		"python_version < '3.10' or platform_system != 'Windows'":          true,
		"(python_version < '3.10' or extra == 'x') and os_name == 'posix'": false,
		"platform_machine in 'x86_64 wasm32'":                              true,
	}
	for m, want := range markers {
		if got, err := evalMarker(m, env); err != nil || got != want {
			t.Errorf("%s: got %v, %v; want %v", m, got, err, want)
		}
	}
	specs := map[string][]string{ // requirement -> versions it accepts, of 1.0 1.4.2 1.5 2.0 2.1rc1
		"x":           {"1.0", "1.4.2", "1.5", "2.0"},
		"x==1.5":      {"1.5"},
		"x>=1.4.2,<2": {"1.4.2", "1.5"},
		"x~=1.4":      {"1.4.2", "1.5"},
		"x!=2.0,>1.0": {"1.4.2", "1.5"},
		"x (<=1.4.2)": {"1.0", "1.4.2"},
		"x==2.1rc1":   {"2.1rc1"},
		"x==1.*":      {"1.0", "1.4.2", "1.5"},
	}
	for s, want := range specs {
		r, err := parseRequirement(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		var got []string
		for _, v := range []string{"1.0", "1.4.2", "1.5", "2.0", "2.1rc1"} {
			if r.satisfiedBy(v) {
				got = append(got, v)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %v, want %v", s, got, want)
		}
	}
	for _, bad := range []string{"x @ https://evil.example/x.whl", "../x", "x; import os"} {
		if _, err := parseRequirement(bad); err == nil && !strings.Contains(bad, ";") {
			t.Errorf("%q accepted", bad)
		}
	}
	if pureWheel("a-1.0-cp314-cp314-pyodide_2026_0_wasm32.whl") || !pureWheel("a-1.0-py2.py3-none-any.whl") || pureWheel("a-1.0-py2-none-any.whl") {
		t.Error("pure wheel detection")
	}
}

// TestCacheBound: past PackageCacheMaxBytes the least recently used wheels go, except
// those a load in flight needs.
func TestCacheBound(t *testing.T) {
	idx := newPipIndex(t)
	cfg := DefaultConfig()
	cfg.PackageDir, cfg.PackageCacheDir, cfg.PipIndex, cfg.PipHosts = t.TempDir(), t.TempDir(), idx.url(), nil
	cfg.PackageCDN = ""
	f, err := newPackageFetcher(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	load := f.begin(nil)
	plan, err := f.install(ctx, load, pipRequest{Requirements: []string{"sandchat-pipmain"}, Deps: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	both := f.cacheBytes()
	// Bound the cache below the two wheels: while the install is in flight both stay.
	f.max = both - 1
	f.release(nil)
	if f.cacheBytes() != both {
		t.Fatalf("a pinned wheel was evicted: %d of %d bytes left", f.cacheBytes(), both)
	}
	load.done()
	if f.cacheBytes() > f.max {
		t.Fatalf("cache holds %d bytes over its bound %d", f.cacheBytes(), f.max)
	}
	var onDisk int64
	_ = filepath.Walk(cfg.PackageCacheDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && cacheable(p) {
			onDisk += info.Size()
		}
		return nil
	})
	if onDisk != f.cacheBytes() || onDisk == 0 {
		t.Fatalf("the cache directory holds %d bytes, the account says %d", onDisk, f.cacheBytes())
	}
	// The wheel evicted was the least recently used: the one fetched first (the
	// requirement itself; its dependency came after it).
	main, dep := plan.wheels[1], plan.wheels[0]
	if fileExists(filepath.Join(cfg.PackageCacheDir, main.rel())) || !fileExists(filepath.Join(cfg.PackageCacheDir, dep.rel())) {
		t.Fatalf("eviction kept %s rather than %s", main.File, dep.File)
	}
	// A restarted server sees the same account.
	g, err := newPackageFetcher(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if g.cacheBytes() != f.cacheBytes() {
		t.Fatalf("after a restart the cache holds %d bytes, before %d", g.cacheBytes(), f.cacheBytes())
	}
	// Over the per-install byte limit: refused before anything is fetched.
	cfg.PipMaxBytes = 1
	h, _ := newPackageFetcher(cfg, testLogger(t))
	_, err = h.install(ctx, h.begin(nil), pipRequest{Requirements: []string{"sandchat-pipdep"}}, nil)
	var pe *pipError
	if !errors.As(err, &pe) || !strings.Contains(pe.msg, "at most") {
		t.Fatalf("byte limit: %v", err)
	}
}

// TestPreload: modules in Config.Preload are in the base snapshot (fetched once, at
// boot), and Request.Preload imports modules before the code.
func TestPreload(t *testing.T) {
	shared, _, _ := setup(t)
	cdn := newCDN(t, shared.cfg.PyodideDir)
	e, _ := newEngine(t, func(c *Config) {
		c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(t)
		c.Preload = []string{"sandchat_cdn"}
	})
	booted := cdn.requests()
	if booted != 2 {
		t.Fatalf("boot fetched %d wheels: %v", booted, cdn.String())
	}
	r := mustSucceed(t, e, "pre", "import sys\nfirst = 'sandchat_cdn' in sys.modules\nimport sandchat_cdn\n(first, sandchat_cdn.hello())")
	if resultOf(r) != "(True, 'hi from the cdn, hi from the cdn')" || cdn.requests() != booted {
		t.Fatalf("got %s with %d requests", resultOf(r), cdn.requests()-booted)
	}
	t.Run("a request's preload is imported before the code", func(t *testing.T) {
		res, err := e.Execute(context.Background(), "req", Request{Code: "import sys\n'fractions' in sys.modules", Preload: []string{"fractions", "no_such_module"}})
		if err != nil || resultOf(res) != "True" || !strings.Contains(res.Stderr, "preload of no_such_module failed") {
			t.Fatalf("%v: %s, stderr %q", err, resultOf(res), res.Stderr)
		}
		_, err = e.Execute(context.Background(), "req", Request{Code: "1", Preload: []string{"os; import socket"}})
		if sandchat.ErrorCode(err) != sandchat.EINVALID {
			t.Fatalf("bad preload name: %v", err)
		}
	})
}
