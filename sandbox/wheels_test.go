package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs/pkgstest"
)

// testWheel is a wheel the tests build, serve and install (built by pkgstest).
type testWheel struct {
	name, version string
	files         map[string]string // path in the wheel -> content
	requires      []string          // Requires-Dist lines (pip index)
	depends       []string          // lock file "depends" (Pyodide distribution)
	tag           string            // wheel tag; default py3-none-any
}

func (w testWheel) wheel() pkgstest.Wheel {
	return pkgstest.Wheel{Name: w.name, Version: w.version, Files: w.files, Requires: w.requires, Depends: w.depends, Tag: w.tag}
}

func (w testWheel) fileName() string { return w.wheel().FileName() }

// build zips the wheel as `pip wheel` would for a small package.
func (w testWheel) build(t testing.TB) []byte { return w.wheel().Build(t) }

func sha256Hex(b []byte) string { return pkgstest.SHA256Hex(b) }

// writeLock writes into dir Pyodide's lock file with the wheels added, each with the
// given sha256 (its own when absent from sums).
func writeLock(t testing.TB, pyodideDir, dir string, wheels map[string][]byte, specs []testWheel, sums map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pyodideDir, "pyodide-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock map[string]any
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatal(err)
	}
	for _, w := range specs {
		key := strings.ReplaceAll(w.name, "_", "-")
		sum := sums[key]
		if sum == "" {
			sum = sha256Hex(wheels[w.fileName()])
		}
		lock["packages"].(map[string]any)[key] = map[string]any{
			"name": key, "version": w.version, "file_name": w.fileName(), "install_dir": "site", "sha256": sum,
			"package_type": "package", "imports": []string{w.name}, "depends": append([]string{}, w.depends...), "unvendored_tests": false,
		}
	}
	out, _ := json.Marshal(lock)
	if err := os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readableTempDir(t testing.TB) string {
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

// hitCounter counts the requests a test server answered, by path.
type hitCounter struct{ pkgstest.HitCounter }

func (h *hitCounter) hit(path string) { h.Hit(path) }

// requests is how many requests were answered in all.
func (h *hitCounter) requests() int { return h.Requests() }
