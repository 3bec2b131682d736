package sandbox

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs/pkgstest"
)

// pipIndex is a local PyPI: its JSON API under /pypi/ and the wheels under /files/.
type pipIndex struct{ *pkgstest.Index }

func (p *pipIndex) url() string { return p.URL() }

// requests is how many requests the index answered in all.
func (p *pipIndex) requests() int { return p.Requests() }

// newPipIndex serves: sandchat-pipmain (needs sandchat-pipdep; two more requirements
// that do not apply to Pyodide), sandchat-pipdep, sandchat-pipbad (the index's sha256
// is wrong) and sandchat-compiled (only a wheel for CPython on another platform).
func newPipIndex(t testing.TB, more ...pkgstest.Release) *pipIndex {
	t.Helper()
	bad := testWheel{name: "sandchat_pipbad", version: "1.0", files: map[string]string{"sandchat_pipbad/__init__.py": "X = 1\n"}}
	rels := []pkgstest.Release{
		{Wheels: []pkgstest.Wheel{testWheel{name: "sandchat_pipmain", version: "2.0", requires: []string{"sandchat-pipdep>=1.0", "sandchat-never; extra == 'test'", "sandchat-never ; sys_platform == 'win32'"},
			files: map[string]string{"sandchat_pipmain/__init__.py": "from sandchat_pipdep import shout\ndef hello():\n    return shout('hi from pip')\n"}}.wheel()}},
		{Wheels: []pkgstest.Wheel{testWheel{name: "sandchat_pipdep", version: "1.1", files: map[string]string{
			"sandchat_pipdep/__init__.py": "def shout(s):\n    return s.upper() + '!'\n"}}.wheel()}},
		{Wheels: []pkgstest.Wheel{bad.wheel()}, SHA256: map[string]string{bad.fileName(): strings.Repeat("ab", 32)}},
		{Wheels: []pkgstest.Wheel{testWheel{name: "sandchat_compiled", version: "1.0", tag: "cp314-cp314-manylinux_2_17_x86_64", files: map[string]string{"sandchat_compiled/__init__.py": ""}}.wheel()}},
	}
	return &pipIndex{pkgstest.NewIndex(t, append(rels, more...)...)}
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
	t.Parallel()
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
		evictSaved(t, e, "main")
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
		if r.Status != StatusError || !strings.Contains(r.Error.Message, "no wheel of sandchat-compiled 1.0 loads in this sandbox") ||
			!strings.Contains(r.Error.Message, "built for Pyodide (cp314, pyemscripten_2026_0_wasm32)") {
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
	t.Parallel()
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
	t.Parallel()
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

// TestPreload: modules in Config.Preload are in the base snapshot (fetched once, at
// boot), and Request.Preload imports modules before the code.
func TestPreload(t *testing.T) {
	t.Parallel()
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
