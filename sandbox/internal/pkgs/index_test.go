package pkgs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs/pkgstest"
)

// lockInfo is the info of the pinned Pyodide's lock file (3.14, ABI 2026_0).
const lockInfo = `{"info": {"abi_version": "2026_0", "arch": "wasm32", "platform": "emscripten_5_0_3", "python": "3.14.2"}, "packages": {}}`

// newFetcher is a fetcher of pip installs from idx into a cache of its own, with no CDN.
func newFetcher(t *testing.T, idx *pkgstest.Index, mutate ...func(*Settings)) (*Fetcher, Settings) {
	t.Helper()
	cfg := Settings{PackageDir: t.TempDir(), PackageCacheDir: t.TempDir(), PipIndex: idx.URL(), PipAllow: []string{"*"},
		PackageCacheMaxBytes: 1 << 30, PackageCacheMaxFiles: 100, PackageRunMaxFiles: 64, PackageRunMaxBytes: 1 << 30, PackageRunMaxFetches: 64,
		PackageSessionMaxFiles: 64, PackageSessionMaxBytes: 1 << 30, PackageSessionMaxFetches: 64,
		PipMaxPackages: 20, PipMaxBytes: 100 << 20, PipMaxIndexRequests: 40}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := os.WriteFile(filepath.Join(cfg.PackageDir, "pyodide-lock.json"), []byte(lockInfo), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg
}

func mainAndDep() []pkgstest.Release {
	return []pkgstest.Release{
		{Wheels: []pkgstest.Wheel{{Name: "sandchat_pipmain", Version: "2.0", Requires: []string{"sandchat-pipdep>=1.0", "sandchat-never; extra == 'test'"},
			Files: map[string]string{"sandchat_pipmain/__init__.py": "X = 1\n"}}}},
		{Wheels: []pkgstest.Wheel{{Name: "sandchat_pipdep", Version: "1.1", Files: map[string]string{"sandchat_pipdep/__init__.py": "Y = 2\n"}}}},
	}
}

// TestResolveCompiled: a wheel built for the sessions' Pyodide wins over the pure-Python
// one of the same release, as pip prefers it, and so do its dependencies'; a wheel for
// another platform or Python is never taken.
func TestResolveCompiled(t *testing.T) {
	t.Parallel()
	tag := "cp314-cp314-pyemscripten_2026_0_wasm32"
	idx := pkgstest.NewIndex(t,
		pkgstest.Release{Wheels: []pkgstest.Wheel{
			{Name: "sandchat_fast", Version: "1.0", Requires: []string{"sandchat-fastdep"}, Files: map[string]string{"sandchat_fast/__init__.py": "PURE = True\n"}},
			{Name: "sandchat_fast", Version: "1.0", Tag: "cp313-cp313-pyemscripten_2025_0_wasm32", Files: map[string]string{"sandchat_fast/__init__.py": "OLD = True\n"}},
			{Name: "sandchat_fast", Version: "1.0", Tag: tag, Files: map[string]string{"sandchat_fast/__init__.py": "PURE = False\n"}},
			{Name: "sandchat_fast", Version: "1.0", Tag: "cp314-cp314-manylinux_2_17_x86_64", Files: map[string]string{"sandchat_fast/__init__.py": ""}},
		}},
		pkgstest.Release{Wheels: []pkgstest.Wheel{
			{Name: "sandchat_fastdep", Version: "3.0", Tag: "cp312-abi3-pyemscripten_2026_0_wasm32", Files: map[string]string{"sandchat_fastdep/__init__.py": ""}},
			{Name: "sandchat_fastdep", Version: "3.0", Files: map[string]string{"sandchat_fastdep/__init__.py": ""}},
		}},
		pkgstest.Release{Wheels: []pkgstest.Wheel{
			{Name: "sandchat_linuxonly", Version: "1.0", Tag: "cp314-cp314-manylinux_2_17_x86_64", Files: map[string]string{"sandchat_linuxonly/__init__.py": ""}},
		}},
	)
	f, cfg := newFetcher(t, idx)
	load := f.Begin(nil)
	plan, err := f.Install(context.Background(), load, Request{Requirements: []string{"sandchat-fast"}, Deps: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer load.Done()
	var got []string
	for _, w := range plan.Wheels {
		got = append(got, w.File)
		if !fileExists(filepath.Join(cfg.PackageCacheDir, w.Rel())) {
			t.Errorf("%s is not in the cache", w.File)
		}
	}
	want := "sandchat_fastdep-3.0-cp312-abi3-pyemscripten_2026_0_wasm32.whl sandchat_fast-1.0-" + tag + ".whl"
	if strings.Join(got, " ") != want {
		t.Fatalf("installs %v, want %s", got, want)
	}
	_, err = f.Install(context.Background(), f.Begin(nil), Request{Requirements: []string{"sandchat-linuxonly"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no wheel of sandchat-linuxonly 1.0 loads in this sandbox") || !strings.Contains(err.Error(), "pyemscripten_2026_0_wasm32") {
		t.Fatalf("a wheel for another platform: %v", err)
	}
}

// TestCacheBound: past PackageCacheMaxBytes the least recently used wheels go, except
// those a load in flight needs.
func TestCacheBound(t *testing.T) {
	t.Parallel()
	idx := pkgstest.NewIndex(t, mainAndDep()...)
	f, cfg := newFetcher(t, idx)
	ctx := context.Background()
	load := f.Begin(nil)
	plan, err := f.Install(ctx, load, Request{Requirements: []string{"sandchat-pipmain"}, Deps: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	both := f.CacheBytes()
	// Bound the cache below the two wheels: while the install is in flight both stay.
	f.max = both - 1
	f.release(nil)
	if f.CacheBytes() != both {
		t.Fatalf("a pinned wheel was evicted: %d of %d bytes left", f.CacheBytes(), both)
	}
	load.Done()
	if f.CacheBytes() > f.max {
		t.Fatalf("cache holds %d bytes over its bound %d", f.CacheBytes(), f.max)
	}
	var onDisk int64
	_ = filepath.Walk(cfg.PackageCacheDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && Cacheable(p) {
			onDisk += info.Size()
		}
		return nil
	})
	if onDisk != f.CacheBytes() || onDisk == 0 {
		t.Fatalf("the cache directory holds %d bytes, the account says %d", onDisk, f.CacheBytes())
	}
	// The wheel evicted was the least recently used: the one fetched first (the
	// requirement itself; its dependency came after it).
	main, dep := plan.Wheels[1], plan.Wheels[0]
	if fileExists(filepath.Join(cfg.PackageCacheDir, main.Rel())) || !fileExists(filepath.Join(cfg.PackageCacheDir, dep.Rel())) {
		t.Fatalf("eviction kept %s rather than %s", main.File, dep.File)
	}
	// A restarted server sees the same account.
	g, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if g.CacheBytes() != f.CacheBytes() {
		t.Fatalf("after a restart the cache holds %d bytes, before %d", g.CacheBytes(), f.CacheBytes())
	}
	// Over the per-install byte limit: refused before anything is fetched.
	cfg.PipMaxBytes = 1
	h, _ := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err = h.Install(ctx, h.Begin(nil), Request{Requirements: []string{"sandchat-pipdep"}}, nil)
	var pe *Error
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "at most") {
		t.Fatalf("byte limit: %v", err)
	}
}

// TestNotOnIndex: a project the index does not have is refused as such, and the answer
// is kept: asking again in a row does not ask the index again.
func TestNotOnIndex(t *testing.T) {
	t.Parallel()
	idx := pkgstest.NewIndex(t, mainAndDep()...)
	f, _ := newFetcher(t, idx)
	ctx := context.Background()
	for i := range 2 {
		load := f.Begin(nil)
		_, err := f.Install(ctx, load, Request{Requirements: []string{"sandchat-missing"}}, nil)
		load.Done()
		var pe *Error
		if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "sandchat-missing") {
			t.Fatalf("install %d of a missing project: %v", i+1, err)
		}
	}
	if n := idx.Requests(); n != 1 {
		t.Fatalf("the index was asked %d times (%s); want once", n, idx.String())
	}
}
