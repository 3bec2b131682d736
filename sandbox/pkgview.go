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
//
// What a load may take is bounded: files, bytes and downloads per run (a pkgRun) and
// per session process (its pkgView, over its life), and the cache as a whole (its
// bound is never passed, even by loads in flight: the fetch that would pass it is
// refused).

const sessionsDir = "sessions" // under the cache directory; never cached files

// pkgView is one session process's window on the package cache.
type pkgView struct {
	f      *packageFetcher
	dir    string // on the host
	inside string // where the session sees it: the cache's path under bubblewrap, dir without

	mu      sync.Mutex
	files   map[string]bool // cache files given to the session over its life
	bytes   int64
	fetches int
}

// openView makes process id's view; bound tells whether bubblewrap binds it at the
// cache's path (strict isolation) or the session reads dir itself.
func (f *packageFetcher) openView(id string, bound bool) (*pkgView, error) {
	v := &pkgView{f: f, dir: filepath.Join(f.dir, sessionsDir, id), inside: f.dir, files: map[string]bool{}}
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
	if at == "" || at == cacheDir {
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

	mu        sync.Mutex
	files     int
	bytes     int64
	fetches   int
	indexLeft int // index documents the install in flight may still ask for
	pinned    []string
	linked    map[string]bool
	progress  func(name string) // told of each package downloaded for the load, if set
}

// boundErrorf is a refusal at one of the package bounds: the fetches after it in the
// same load would meet it too.
func boundErrorf(format string, a ...any) error {
	return &pipError{msg: fmt.Sprintf(format, a...), bound: true}
}

func isBound(err error) bool {
	var pe *pipError
	return errors.As(err, &pe) && pe.bound
}

// ensure puts the packages the code's imports and names need into the cache and the
// view; it returns one note per package that could not be served, for the run's stderr.
func (r *pkgRun) ensure(ctx context.Context, code string, names []string) (notes []string) {
	if r == nil || r.f.cdn == "" {
		return nil
	}
	f := r.v.f
	need := f.needed(code, names)
	var missing []string
	defer func() {
		if len(missing) > 0 {
			notes = append(notes, unservedNote(missing))
		}
	}()
	for i, n := range need {
		err := f.fetch(ctx, r, f.pkgs[n])
		if err == nil {
			continue
		}
		if unserved(err) {
			f.log.Warn("package not served", "package", f.pkgs[n].Name, "err", err)
			missing = append(missing, f.pkgs[n].Name)
			var se *sourceError
			if errors.As(err, &se) {
				// Unreachable: the others would wait for it too.
				for _, rest := range need[i+1:] {
					missing = append(missing, f.pkgs[rest].Name)
				}
				break
			}
			continue
		}
		notes = append(notes, fmt.Sprintf("[sandbox] package %s could not be loaded: %v", f.pkgs[n].Name, err))
		if isBound(err) && i+1 < len(need) {
			notes = append(notes, fmt.Sprintf("[sandbox] %d more packages were not fetched", len(need)-i-1))
			break
		}
	}
	return notes
}

// fetched asks to download one more file (a wheel or an index document) for the load.
func (r *pkgRun) fetched() error {
	if r == nil {
		return nil
	}
	cfg := &r.f.cfg
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetches >= cfg.PackageRunMaxFetches {
		return boundErrorf("a run may make at most %d package downloads (PackageRunMaxFetches, SANDCHAT_SANDBOX_PACKAGE_RUN_MAX_FETCHES)", cfg.PackageRunMaxFetches)
	}
	if v := r.v; v != nil {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.fetches >= cfg.PackageSessionMaxFetches {
			return boundErrorf("a session process may make at most %d package downloads (PackageSessionMaxFetches, SANDCHAT_SANDBOX_PACKAGE_SESSION_MAX_FETCHES)", cfg.PackageSessionMaxFetches)
		}
		v.fetches++
	}
	r.fetches++
	return nil
}

// indexAsked asks for one more index document in the install in flight.
func (r *pkgRun) indexAsked() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if r.indexLeft <= 0 {
		r.mu.Unlock()
		n := r.f.cfg.PipMaxIndexRequests
		return boundErrorf("an install may ask the package index at most %d times (PipMaxIndexRequests, SANDCHAT_SANDBOX_PIP_MAX_INDEX_REQUESTS)", n)
	}
	r.indexLeft--
	r.mu.Unlock()
	return r.fetched()
}

// take counts rel (size bytes) against the load's and the session's bounds; a file
// the load or the session already has counts once.
func (r *pkgRun) take(rel string, size int64) error {
	if r == nil {
		return nil
	}
	cfg := &r.f.cfg
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.linked[rel] {
		return nil
	}
	if r.files+1 > cfg.PackageRunMaxFiles {
		return boundErrorf("%s refused: a run may load at most %d package files (PackageRunMaxFiles, SANDCHAT_SANDBOX_PACKAGE_RUN_MAX_FILES)", filepath.Base(rel), cfg.PackageRunMaxFiles)
	}
	if r.bytes+size > cfg.PackageRunMaxBytes {
		return boundErrorf("%s refused: a run may load at most %d MiB of packages (PackageRunMaxBytes, SANDCHAT_SANDBOX_PACKAGE_RUN_MAX)", filepath.Base(rel), cfg.PackageRunMaxBytes>>20)
	}
	if v := r.v; v != nil {
		v.mu.Lock()
		defer v.mu.Unlock()
	}
	if v := r.v; v != nil && !v.files[rel] {
		if len(v.files)+1 > cfg.PackageSessionMaxFiles {
			return boundErrorf("%s refused: a session process may load at most %d package files (PackageSessionMaxFiles, SANDCHAT_SANDBOX_PACKAGE_SESSION_MAX_FILES)", filepath.Base(rel), cfg.PackageSessionMaxFiles)
		}
		if v.bytes+size > cfg.PackageSessionMaxBytes {
			return boundErrorf("%s refused: a session process may load at most %d MiB of packages (PackageSessionMaxBytes, SANDCHAT_SANDBOX_PACKAGE_SESSION_MAX)", filepath.Base(rel), cfg.PackageSessionMaxBytes>>20)
		}
		v.files[rel] = true
		v.bytes += size
	}
	r.files++
	r.bytes += size
	r.linked[rel] = false // counted; linked once give succeeds
	return nil
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

// giveCached gives the load rel, pinned in the cache by use or admit, if the bounds
// allow; else it unpins it.
func (r *pkgRun) giveCached(rel string, size int64) error {
	if r == nil {
		return nil
	}
	if err := r.take(rel, size); err != nil {
		r.f.release([]string{rel})
		return err
	}
	return r.give(rel)
}
