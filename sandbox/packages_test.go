package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// packageMirror makes a package directory like a mirror of the Pyodide distribution:
// Pyodide's lock file plus one extra pure-Python wheel registered in it.
func packageMirror(t testing.TB, pyodideDir string) string {
	t.Helper()
	dir := readableTempDir(t)
	demo := testWheel{name: "sandchat_demo", version: "1.0", files: map[string]string{
		"sandchat_demo/__init__.py": "def greet(who):\n    return 'hello ' + who + ' from a wheel'\n",
	}}
	wheels := map[string][]byte{demo.fileName(): demo.build(t)}
	if err := os.WriteFile(filepath.Join(dir, demo.fileName()), wheels[demo.fileName()], 0o644); err != nil {
		t.Fatal(err)
	}
	writeLock(t, pyodideDir, dir, wheels, []testWheel{demo}, nil)
	return dir
}

func TestPackages(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	mirror := packageMirror(t, shared.cfg.PyodideDir)
	e, _ := newEngine(t, func(c *Config) { c.PackageDir = mirror })

	tests := []struct {
		name, code, want string
		evictFirst       bool
	}{
		{name: "import resolves through the lock file", code: "import sandchat_demo\nsandchat_demo.greet('sandbox')", want: "'hello sandbox from a wheel'"},
		{name: "the package survives a restore", code: "sandchat_demo.greet('again')", want: "'hello again from a wheel'", evictFirst: true},
		{name: "a fresh import after restore works", code: "import importlib, sandchat_demo\nimportlib.reload(sandchat_demo).greet('x')", want: "'hello x from a wheel'", evictFirst: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.evictFirst {
				evictSaved(t, e, "pkg")
			}
			r := mustSucceed(t, e, "pkg", tt.code)
			if got := resultOf(r); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if !slices.Contains(r.Session.Packages, "sandchat-demo") {
				t.Fatalf("packages %v", r.Session.Packages)
			}
			if tt.evictFirst && r.Session.RestoredFrom != FromSnapshot {
				t.Fatalf("restored from %s", r.Session.RestoredFrom)
			}
		})
	}
	t.Run("a package listed but missing from the mirror says whom to ask", func(t *testing.T) {
		r := run(t, e, "pkg2", "import numpy")
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" || r.Error.Message != "No module named 'numpy': "+pkgs.UnservedLine || r.Stderr != "" {
			t.Fatalf("got %s %+v, stderr %q", r.Status, r.Error, r.Stderr)
		}
	})
}
