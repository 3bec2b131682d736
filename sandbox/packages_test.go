package sandbox

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// buildWheel zips a pure-Python wheel, as `pip wheel` would for a one-module package.
func buildWheel(t *testing.T, name, version string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	dist := name + "-" + version + ".dist-info/"
	all := map[string]string{
		dist + "METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n",
		dist + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sandchat-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for k, v := range files {
		all[k] = v
	}
	record := ""
	for k, v := range all {
		sum := sha256.Sum256([]byte(v))
		record += k + ",sha256=" + hex.EncodeToString(sum[:]) + "," + itoa(len(v)) + "\n"
	}
	all[dist+"RECORD"] = record + dist + "RECORD,,\n"
	for k, v := range all {
		w, err := zw.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(v))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// packageMirror makes a package directory like a mirror of the Pyodide distribution:
// Pyodide's lock file plus one extra pure-Python wheel registered in it.
func packageMirror(t *testing.T, pyodideDir string) string {
	t.Helper()
	dir := t.TempDir()
	// Session processes run as an unprivileged user: the mirror must be readable to it.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wheel := buildWheel(t, "sandchat_demo", "1.0", map[string]string{
		"sandchat_demo/__init__.py": "def greet(who):\n    return 'hello ' + who + ' from a wheel'\n",
	})
	file := "sandchat_demo-1.0-py3-none-any.whl"
	if err := os.WriteFile(filepath.Join(dir, file), wheel, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(pyodideDir, "pyodide-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock map[string]any
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wheel)
	lock["packages"].(map[string]any)["sandchat-demo"] = map[string]any{
		"name": "sandchat-demo", "version": "1.0", "file_name": file, "install_dir": "site",
		"sha256": hex.EncodeToString(sum[:]), "package_type": "package", "imports": []string{"sandchat_demo"},
		"depends": []string{}, "unvendored_tests": false,
	}
	out, _ := json.Marshal(lock)
	if err := os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPackages(t *testing.T) {
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
				evictLive(t, e, "pkg")
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
	t.Run("a package listed but missing from the mirror fails with a hint", func(t *testing.T) {
		r := run(t, e, "pkg2", "import numpy")
		if r.Status != StatusError || r.Error.Type != "ModuleNotFoundError" || !bytes.Contains([]byte(r.Error.Message), []byte("package mirror")) {
			t.Fatalf("got %s %+v", r.Status, r.Error)
		}
	})
}
