package sandbox

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testWheel is a wheel the tests build, serve and install: the one builder behind the
// package mirror, the CDN and the pip index fixtures.
type testWheel struct {
	name, version string
	files         map[string]string // path in the wheel -> content
	requires      []string          // Requires-Dist lines (pip index)
	depends       []string          // lock file "depends" (Pyodide distribution)
	tag           string            // wheel tag; default py3-none-any
}

func (w testWheel) fileName() string {
	tag := w.tag
	if tag == "" {
		tag = "py3-none-any"
	}
	return w.name + "-" + w.version + "-" + tag + ".whl"
}

// build zips the wheel as `pip wheel` would for a small package.
func (w testWheel) build(t testing.TB) []byte {
	t.Helper()
	tag := w.tag
	if tag == "" {
		tag = "py3-none-any"
	}
	dist := w.name + "-" + w.version + ".dist-info/"
	meta := "Metadata-Version: 2.1\nName: " + w.name + "\nVersion: " + w.version + "\n"
	for _, r := range w.requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	all := map[string]string{
		dist + "METADATA": meta,
		dist + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sandchat-test\nRoot-Is-Purelib: true\nTag: " + tag + "\n",
	}
	for k, v := range w.files {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	record := ""
	for _, k := range names {
		sum := sha256.Sum256([]byte(all[k]))
		record += k + ",sha256=" + hex.EncodeToString(sum[:]) + "," + strconv.Itoa(len(all[k])) + "\n"
	}
	all[dist+"RECORD"] = record + dist + "RECORD,,\n"
	names = append(names, dist+"RECORD")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, k := range names {
		f, err := zw.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(all[k])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

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
			"package_type": "package", "imports": []string{w.name}, "depends": nonNil(w.depends), "unvendored_tests": false,
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
type hitCounter struct {
	mu   sync.Mutex
	hits map[string]int
}

func (h *hitCounter) hit(path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hits == nil {
		h.hits = map[string]int{}
	}
	h.hits[path]++
}

// requests is how many requests were answered in all.
func (h *hitCounter) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.hits {
		n += v
	}
	return n
}

func (h *hitCounter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.hits)
}
