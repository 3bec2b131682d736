package pkgs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
// What a load may take is bounded: files, bytes and downloads per run (a Load) and
// per session process (its View, over its life), and the cache as a whole (its
// bound is never passed, even by loads in flight: the fetch that would pass it is
// refused).

const sessionsDir = "sessions" // under the cache directory; never cached files

// View is one session process's window on the package cache.
type View struct {
	f      *Fetcher
	dir    string // on the host
	inside string // where the session sees it: the cache's path under bubblewrap, dir without

	mu      sync.Mutex
	files   map[string]bool // cache files given to the session over its life
	bytes   int64
	fetches int
}

// OpenView makes process id's view; bound tells whether bubblewrap binds it at the
// cache's path (strict isolation) or the session reads dir itself.
func (f *Fetcher) OpenView(id string, bound bool) (*View, error) {
	v := &View{f: f, dir: filepath.Join(f.dir, sessionsDir, id), inside: f.dir, files: map[string]bool{}}
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
			v.Close()
			return nil, fmt.Errorf("package view: %w", err)
		}
	}
	return v, nil
}

// Close removes the view; its process is gone.
func (v *View) Close() {
	if v != nil {
		_ = os.RemoveAll(v.dir)
	}
}

// Inside is where the session reads the view, "" for none.
func (v *View) Inside() string {
	if v == nil {
		return ""
	}
	return v.inside
}

// HostDir is the view's directory on the host, "" for none.
func (v *View) HostDir() string {
	if v == nil {
		return ""
	}
	return v.dir
}

// Begin opens a load for view v.
func (f *Fetcher) Begin(v *View) *Load {
	return &Load{f: f, v: v, linked: map[string]bool{}, unserved: map[string]bool{}}
}

// Load is what one load took from the cache: pinned there, linked into the view.
type Load struct {
	f *Fetcher
	v *View // nil: a load with no session (the tests' fetcher alone)

	mu        sync.Mutex
	files     int
	bytes     int64
	fetches   int
	indexLeft int // index documents the install in flight may still ask for
	pinned    []string
	linked    map[string]bool
	// unserved are the packages the load could not be given (Ensure); unreachable: the
	// source did not answer, and is not asked again in this load; told: the operator
	// was told (the log).
	unserved    map[string]bool
	unreachable bool
	told        bool
	Progress    func(name string) // told of each package downloaded for the load, if set
}

// Ensure puts the packages the code's imports and names need into the cache and the
// view. Those the server cannot serve (not in its mirror, and its source off,
// unreachable or without them) become the load's Unserved: the operator is told why in
// the server's log, once per load; the user is told by the import that fails
// (UnservedLine). It returns one note per refusal a user can act on (a bound, a
// checksum), for the run's stderr.
func (r *Load) Ensure(ctx context.Context, code string, names []string) (notes []string) {
	if r == nil {
		return nil
	}
	f := r.f
	var missing []string
	var why error
	defer func() {
		if len(missing) > 0 {
			r.unserve(missing, why)
		}
	}()
	if f.cdn == "" {
		// Sessions load the code's imports from the mirror themselves; an import that
		// finds nothing there asks again by name (the driver's finder, through pip.go).
		// What the mirror lacks cannot be served.
		for _, n := range f.needed("", names) {
			if !fileExists(filepath.Join(f.mirror, f.pkgs[n].FileName)) {
				missing = append(missing, f.pkgs[n].Name)
			}
		}
		why = errors.New("the package directory does not have them and no package source is set")
		return nil
	}
	need := f.needed(code, names)
	for i, n := range need {
		err := f.fetch(ctx, r, f.pkgs[n])
		if err == nil {
			continue
		}
		if unserved(err) {
			missing = append(missing, f.pkgs[n].Name)
			if why == nil {
				why = err
			}
			var se *sourceError
			if errors.As(err, &se) {
				// Unreachable: the others would wait for it too, and so would the rest
				// of the load (an import the code makes later asks again).
				r.mu.Lock()
				r.unreachable = true
				r.mu.Unlock()
				for _, rest := range need[i+1:] {
					missing = append(missing, f.pkgs[rest].Name)
				}
				break
			}
			continue
		}
		notes = append(notes, fmt.Sprintf("[sandbox] package %s could not be loaded: %v", f.pkgs[n].Name, err))
		if IsBound(err) && i+1 < len(need) {
			notes = append(notes, fmt.Sprintf("[sandbox] %d more packages were not fetched", len(need)-i-1))
			break
		}
	}
	return notes
}

// unserve records packages the load could not be given, and tells the operator why and
// what fixes it, once per load.
func (r *Load) unserve(names []string, why error) {
	r.mu.Lock()
	var fresh []string
	for _, n := range names {
		if !r.unserved[n] {
			r.unserved[n] = true
			fresh = append(fresh, n)
		}
	}
	told := r.told
	r.told = true
	r.mu.Unlock()
	if len(fresh) > 0 && !told {
		r.f.log.Warn("packages not served to a session: "+unservedFix, "packages", strings.Join(fresh, ", "), "err", why)
	}
}

// Unserved tells whether the load could not be given package name (as the lock file
// names it).
func (r *Load) Unserved(name string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unserved[name]
}

// gaveUp tells whether the load found the package source unreachable already.
func (r *Load) gaveUp() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable
}

// UnservedNames are the packages the load could not be given, sorted.
func (r *Load) UnservedNames() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.unserved))
	for n := range r.unserved {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fetched asks to download one more file (a wheel or an index document) for the load.
func (r *Load) fetched() error {
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
func (r *Load) indexAsked() error {
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
func (r *Load) take(rel string, size int64) error {
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
func (r *Load) give(rel string) error {
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

// Path is where the session reads rel.
func (r *Load) Path(rel string) string {
	return filepath.Join(r.v.inside, rel)
}

// Done unlinks what the load was given and unpins it in the cache.
func (r *Load) Done() {
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
func (r *Load) giveCached(rel string, size int64) error {
	if r == nil {
		return nil
	}
	if err := r.take(rel, size); err != nil {
		r.f.release([]string{rel})
		return err
	}
	return r.give(rel)
}
