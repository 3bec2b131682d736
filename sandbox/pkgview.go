package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// A session process never sees the shared package cache. It gets a view: a directory
// of its own, <cache>/sessions/<process id>/, empty but for the lock file, which
// bubblewrap binds read-only where the cache is (so the paths Pyodide and micropip are
// given are the ones they always were, and name nothing new). While a run, a restore or
// the boot loads packages, the engine hard-links the wheels it fetched for that load
// from the cache into the view (same filesystem: no copy; a bind mount shows files added
// later), and unlinks them when the load is over: Pyodide keeps what it loaded in its
// own memory. So a session can list and open only the wheels its current load asked
// for, never what another session fetched. The view goes with its process.

const sessionsDir = "sessions" // under the cache directory; never cached files

// pkgView is one session process's window on the package cache.
type pkgView struct {
	f      *packageFetcher
	dir    string // on the host
	inside string // where the session sees it: the cache's path under bubblewrap, dir without
}

// openView makes process id's view; bound tells whether bubblewrap binds it at the
// cache's path (strict isolation) or the session reads dir itself.
func (f *packageFetcher) openView(id string, bound bool) (*pkgView, error) {
	v := &pkgView{f: f, dir: filepath.Join(f.dir, sessionsDir, id), inside: f.dir}
	if !bound {
		v.inside = v.dir
	}
	for _, d := range []string{filepath.Dir(v.dir), v.dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("package view: %w", err)
		}
		_ = os.Chmod(d, 0o755)
	}
	lock := filepath.Join(f.dir, "pyodide-lock.json")
	if fileExists(lock) {
		if err := os.Link(lock, filepath.Join(v.dir, "pyodide-lock.json")); err != nil {
			v.close()
			return nil, fmt.Errorf("package view: %w", err)
		}
	}
	return v, nil
}

// close removes the view; its process is gone.
func (v *pkgView) close() {
	if v != nil {
		_ = os.RemoveAll(v.dir)
	}
}

// hostDir is the view's directory on the host, "" for none.
func (v *pkgView) hostDir() string {
	if v == nil {
		return ""
	}
	return v.dir
}

// configure points a session's runtime configuration at its view: without bubblewrap
// the view is read where it is; without a view the cache is not readable at all.
func (v *pkgView) configure(c *runtimeConfig, cacheDir string) {
	if cacheDir == "" {
		return
	}
	at := ""
	if v != nil {
		at = v.inside
	}
	c.Read = slices.DeleteFunc(c.Read, func(d string) bool { return d == cacheDir })
	if at != "" {
		c.Read = append(c.Read, at)
	}
	if at == cacheDir {
		return
	}
	for _, u := range []*string{c.LockFileURL, c.PackageBaseURL} {
		if u != nil && strings.HasPrefix(*u, cacheDir+"/") {
			*u = at + strings.TrimPrefix(*u, cacheDir)
		}
	}
}

// packages opens what one load in p (a run, a restore, the boot) may take from the
// cache; done ends it. nil without a fetcher.
func (e *Engine) packages(p *proc) *pkgRun {
	if e.fetch == nil || p.pkgs == nil {
		return nil
	}
	return e.fetch.begin(p.pkgs)
}

// begin opens a load for view v.
func (f *packageFetcher) begin(v *pkgView) *pkgRun {
	return &pkgRun{f: f, v: v, linked: map[string]bool{}}
}

// pkgRun is what one load took from the cache: pinned there, linked into the view.
type pkgRun struct {
	f *packageFetcher
	v *pkgView // nil: a load with no session (the tests' fetcher alone)

	mu     sync.Mutex
	pinned []string
	linked map[string]bool
}

// ensure puts the packages the code's imports and names need into the cache and the
// view; it returns one note per package that could not be served, for the run's stderr.
func (r *pkgRun) ensure(ctx context.Context, code string, names []string) (notes []string) {
	if r == nil || r.f.cdn == "" {
		return nil
	}
	f := r.v.f
	for _, n := range f.needed(code, names) {
		if err := f.fetch(ctx, r, f.pkgs[n]); err != nil {
			notes = append(notes, fmt.Sprintf("[sandbox] package %s could not be loaded: %v", f.pkgs[n].Name, err))
		}
	}
	return notes
}

// give links rel, pinned in the cache for this load, into the view.
func (r *pkgRun) give(rel string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pinned = append(r.pinned, rel)
	if r.linked[rel] || r.v == nil {
		return nil
	}
	dst := filepath.Join(r.v.dir, rel)
	if d := filepath.Dir(dst); d != r.v.dir {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		_ = os.Chmod(d, 0o755)
	}
	if err := os.Link(filepath.Join(r.f.dir, rel), dst); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	r.linked[rel] = true
	return nil
}

// path is where the session reads rel.
func (r *pkgRun) path(rel string) string {
	return filepath.Join(r.v.inside, rel)
}

// done unlinks what the load was given and unpins it in the cache.
func (r *pkgRun) done() {
	if r == nil {
		return
	}
	r.mu.Lock()
	pinned := r.pinned
	r.pinned = nil
	for rel, on := range r.linked {
		if on {
			_ = os.Remove(filepath.Join(r.v.dir, rel))
			if d := filepath.Dir(rel); d != "." {
				// A pip wheel's directories, once empty.
				_ = os.Remove(filepath.Join(r.v.dir, d))
				_ = os.Remove(filepath.Join(r.v.dir, filepath.Dir(d)))
			}
		}
	}
	clear(r.linked)
	r.mu.Unlock()
	r.f.release(pinned)
}
