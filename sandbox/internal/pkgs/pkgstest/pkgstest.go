// Package pkgstest builds wheels and serves them from a local package index, for the
// tests of the package fetcher and of the engine: the one builder behind the package
// mirror, the CDN and the pip index fixtures.
package pkgstest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Wheel is a wheel a test builds, serves and installs.
type Wheel struct {
	Name, Version string
	Files         map[string]string // path in the wheel -> content
	Requires      []string          // Requires-Dist lines (pip index)
	Depends       []string          // lock file "depends" (Pyodide distribution)
	Tag           string            // wheel tag; default py3-none-any
}

func (w Wheel) tag() string {
	if w.Tag == "" {
		return "py3-none-any"
	}
	return w.Tag
}

// FileName is the wheel's file name.
func (w Wheel) FileName() string { return w.Name + "-" + w.Version + "-" + w.tag() + ".whl" }

// Build zips the wheel as `pip wheel` would for a small package.
func (w Wheel) Build(t testing.TB) []byte {
	t.Helper()
	dist := w.Name + "-" + w.Version + ".dist-info/"
	meta := "Metadata-Version: 2.1\nName: " + w.Name + "\nVersion: " + w.Version + "\n"
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	pure := strings.HasSuffix(w.tag(), "-none-any")
	all := map[string]string{
		dist + "METADATA": meta,
		dist + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sandchat-test\nRoot-Is-Purelib: " + strconv.FormatBool(pure) + "\nTag: " + w.tag() + "\n",
	}
	for k, v := range w.Files {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	record := ""
	for _, k := range names {
		record += k + ",sha256=" + SHA256Hex([]byte(all[k])) + "," + strconv.Itoa(len(all[k])) + "\n"
	}
	all[dist+"RECORD"] = record + dist + "RECORD,,\n"
	names = append(names, dist+"RECORD")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, k := range names {
		// Large members are stored, not deflated: the tests that make them fill them
		// with random bytes, which deflate cannot shrink and takes long to try.
		method := zip.Deflate
		if len(all[k]) > 1<<20 {
			method = zip.Store
		}
		f, err := zw.CreateHeader(&zip.FileHeader{Name: k, Method: method})
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

// SHA256Hex is b's sha256 as the index and the lock file write it.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// HitCounter counts the requests a test server answered, by path.
type HitCounter struct {
	mu   sync.Mutex
	hits map[string]int
}

// Hit counts one request for path.
func (h *HitCounter) Hit(path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hits == nil {
		h.hits = map[string]int{}
	}
	h.hits[path]++
}

// Requests is how many requests were answered in all.
func (h *HitCounter) Requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.hits {
		n += v
	}
	return n
}

func (h *HitCounter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.hits)
}

// Index is a local PyPI: its JSON API under /pypi/ and the wheels under /files/.
type Index struct {
	Srv *httptest.Server
	HitCounter
}

// URL is the index's base URL, as PipIndex takes it.
func (p *Index) URL() string { return p.Srv.URL + "/pypi/" }

// Release is one project's release on an index: its wheels (several files for one
// version: a compiled one beside a pure-Python one, say).
type Release struct {
	Wheels []Wheel
	// SHA256 overrides the digest the index gives for a file name (a wrong one).
	SHA256 map[string]string
}

// NewIndex serves releases, one project per release: its name and version and
// requirements are its first wheel's.
func NewIndex(t testing.TB, releases ...Release) *Index {
	t.Helper()
	p := &Index{}
	wheels := map[string][]byte{}
	docs := map[string][]byte{}
	p.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Hit(r.URL.Path)
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
	t.Cleanup(p.Srv.Close)
	for _, rel := range releases {
		first := rel.Wheels[0]
		var files []any
		for _, s := range rel.Wheels {
			b := s.Build(t)
			wheels[s.FileName()] = b
			sum := SHA256Hex(b)
			if o, ok := rel.SHA256[s.FileName()]; ok {
				sum = o
			}
			files = append(files, map[string]any{"filename": s.FileName(), "url": p.Srv.URL + "/files/" + s.FileName(),
				"digests": map[string]string{"sha256": sum}, "packagetype": "bdist_wheel", "size": len(b), "yanked": false})
		}
		project := strings.ReplaceAll(first.Name, "_", "-")
		doc := map[string]any{
			"info":     map[string]any{"name": project, "version": first.Version, "requires_dist": first.Requires},
			"urls":     files,
			"releases": map[string]any{first.Version: files, "0.1": []any{}},
		}
		raw, _ := json.Marshal(doc)
		docs["/pypi/"+project+"/json"] = raw
	}
	return p
}
