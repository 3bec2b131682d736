package sandbox

import (
	"strings"
	"testing"
)

// TestDynamicImport: a package of the Pyodide distribution loads by itself when a cell
// that awaits imports it through importlib.import_module or __import__ (which the engine
// cannot see before the run), served by the engine within the run's package bounds,
// with installing turned off too, and the session restores with it; in plain code as in
// a cell that awaits (the driver's run is called through JSPI, so it may wait).
func TestDynamicImport(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	cdn := newCDN(t, shared.cfg.PyodideDir)
	withCDN := func(more func(*Config)) func(*Config) {
		return func(c *Config) {
			c.PackageDir, c.PackageCDN, c.PackageCacheDir, c.PipOff = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(t), true
			if more != nil {
				more(c)
			}
		}
	}
	e, _ := newEngine(t, withCDN(nil))
	want := "'hi from the cdn, hi from the cdn'"
	r := mustSucceed(t, e, "dyn", "import importlib\nname = 'sandchat' + '_cdn'\nimportlib.import_module(name).hello()")
	if resultOf(r) != want {
		t.Fatalf("import_module in plain code: %s (stderr %q)", resultOf(r), r.Stderr)
	}
	r = mustSucceed(t, e, "dyn-await", "import asyncio, importlib\nawait asyncio.sleep(0)\nname = 'sandchat' + '_cdn'\nimportlib.import_module(name).hello()")
	if resultOf(r) != want {
		t.Fatalf("import_module in a cell that awaits: %s (stderr %q)", resultOf(r), r.Stderr)
	}
	t.Run("__import__ in a cell with top-level await", func(t *testing.T) {
		r := mustSucceed(t, e, "dyn-async", "import asyncio\nawait asyncio.sleep(0)\n__import__('sandchat_' + 'dep').twice('x')")
		if resultOf(r) != "'x, x'" {
			t.Fatalf("got %s (stderr %q)", resultOf(r), r.Stderr)
		}
	})
	t.Run("a module no package provides still fails as Python's", func(t *testing.T) {
		r := run(t, e, "dyn", "import importlib\nimportlib.import_module('sandchat_' + 'nowhere')")
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" {
			t.Fatalf("status %s error %+v", r.Status, r.Error)
		}
	})
	t.Run("the session restores with what it loaded", func(t *testing.T) {
		evictLive(t, e, "dyn")
		r := mustSucceed(t, e, "dyn", "import sys\n'sandchat_cdn' in sys.modules, sys.modules['sandchat_cdn'].hello()")
		if resultOf(r) != "(True, "+want+")" {
			t.Fatalf("got %s from %s (stderr %q)", resultOf(r), r.Session.RestoredFrom, r.Stderr)
		}
	})
	t.Run("the run's package bounds hold", func(t *testing.T) {
		e, _ := newEngine(t, withCDN(func(c *Config) { c.PackageRunMaxFetches = 1 }))
		r := run(t, e, "bound", "import asyncio, importlib\nawait asyncio.sleep(0)\nimportlib.import_module('sandchat' + '_cdn')")
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" || !strings.Contains(r.Error.Message, "PackageRunMaxFetches") {
			t.Fatalf("status %s error %+v", r.Status, r.Error)
		}
	})
}
