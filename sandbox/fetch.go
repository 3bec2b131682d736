package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// packageFetcher serves packages into sessions without giving them the network: before
// a run, the engine resolves the code's imports with the lock file, fetches the wheels
// that are missing from the cache directory (from the package mirror if it has them,
// else from the CDN), checks each against the lock's sha256, and writes it atomically.
// micropip.install goes through it too (pip.go). The cache is shared by every session's
// loads, survives restarts and is bounded in files and bytes; a session reads only its
// own view of it, holding what its current load asked for (pkgview.go).
type packageFetcher struct {
	log    *slog.Logger // what users are not shown: hosts and errors of package sources
	cdn    string       // with a trailing slash; empty: lock-file wheels are not fetched
	mirror string       // PackageDir: its wheels win over the CDN
	dir    string       // the cache directory: pyodide-lock.json + verified wheels
	client *http.Client
	cfg    Config

	pkgs    map[string]lockPackage // normalized name -> package
	imports map[string]string      // top-level import name -> package
	python  string                 // the interpreter's version, for dependency markers

	mu       sync.Mutex // one lock-file fetch at a time: a wheel is fetched once, not by every waiting run
	requests atomic.Int64

	cacheMu sync.Mutex
	entries map[string]*cacheEntry // path relative to dir -> entry
	total   int64
	max     int64
	maxFile int

	indexMu sync.Mutex
	index   map[string]indexEntry // pip index answers, kept a few minutes
}

type cacheEntry struct {
	size int64
	used time.Time
	pins int // loads in flight that need the file: it is not evicted
}

type lockPackage struct {
	Name     string   `json:"name"`
	FileName string   `json:"file_name"`
	SHA256   string   `json:"sha256"`
	Imports  []string `json:"imports"`
	Depends  []string `json:"depends"`
}

// maxWheelBytes bounds one download: the largest Pyodide packages are tens of MB.
const maxWheelBytes = 512 << 20

func newPackageFetcher(cfg Config, log *slog.Logger) (*packageFetcher, error) {
	f := &packageFetcher{log: log, mirror: cfg.PackageDir, dir: cfg.PackageCacheDir, cfg: cfg, max: cfg.PackageCacheMaxBytes, maxFile: cfg.PackageCacheMaxFiles,
		pkgs: map[string]lockPackage{}, imports: map[string]string{}, entries: map[string]*cacheEntry{}, index: map[string]indexEntry{}}
	if cfg.PackageCDN != "" {
		f.cdn = strings.TrimSuffix(cfg.PackageCDN, "/") + "/"
	}
	f.client = &http.Client{Timeout: 5 * time.Minute, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if !f.hostAllowed(r.URL) {
			return fmt.Errorf("redirect to %s refused: not an allowed package host", r.URL.Host)
		}
		return nil
	}}
	raw, err := os.ReadFile(filepath.Join(cfg.PackageDir, "pyodide-lock.json"))
	if err != nil && f.cdn != "" {
		return nil, fmt.Errorf("package lock file: %w", err)
	}
	var lock struct {
		Info struct {
			Python string `json:"python"`
		} `json:"info"`
		Packages map[string]lockPackage `json:"packages"`
	}
	if err == nil {
		if err := json.Unmarshal(raw, &lock); err != nil {
			return nil, fmt.Errorf("package lock file: %w", err)
		}
	}
	f.python = lock.Info.Python
	if err := os.MkdirAll(cfg.PackageCacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	// Session processes may run as another user: the cache must be readable to them.
	_ = os.Chmod(cfg.PackageCacheDir, 0o755)
	if raw != nil {
		if err := writeAtomic(cfg.PackageCacheDir, "pyodide-lock.json", raw); err != nil {
			return nil, fmt.Errorf("package cache: %w", err)
		}
	}
	for key, p := range lock.Packages {
		if p.FileName == "" || filepath.Base(p.FileName) != p.FileName {
			continue // absolute URLs and paths are not served from here
		}
		f.pkgs[normalize(key)] = p
		for _, imp := range p.Imports {
			if imp == "micropip" {
				continue // sessions get sandchat's own micropip, which installs through the engine
			}
			f.imports[imp] = normalize(key)
		}
	}
	f.scanCache()
	return f, nil
}

// scanCache learns what a previous run of the server left in the cache, oldest use
// first by modification time (a use touches the file).
func (f *packageFetcher) scanCache() {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	_ = filepath.WalkDir(f.dir, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(f.dir, p)
		if d != nil && d.IsDir() && rel == sessionsDir {
			return filepath.SkipDir // session views: links to cached files
		}
		if err != nil || d.IsDir() {
			return nil
		}
		if !cacheable(rel) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			f.entries[rel] = &cacheEntry{size: info.Size(), used: info.ModTime()}
			f.total += info.Size()
		}
		return nil
	})
	f.evictLocked(0, 0)
}

func cacheable(rel string) bool {
	base := filepath.Base(rel)
	return base != "pyodide-lock.json" && !strings.HasPrefix(base, ".")
}

// use marks a cached file as needed by a load about to happen: it is not evicted until
// release is called. It reports false when the file is not in the cache.
func (f *packageFetcher) use(rel string) (int64, bool) {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	e := f.entries[rel]
	if e == nil {
		if !fileExists(filepath.Join(f.dir, rel)) {
			return 0, false
		}
		// Written by another server sharing the directory.
		info, err := os.Stat(filepath.Join(f.dir, rel))
		if err != nil {
			return 0, false
		}
		e = &cacheEntry{size: info.Size()}
		f.entries[rel] = e
		f.total += e.size
	}
	e.pins++
	e.used = time.Now()
	_ = os.Chtimes(filepath.Join(f.dir, rel), time.Time{}, e.used)
	return e.size, true
}

// release unpins files taken with use or admit.
func (f *packageFetcher) release(rels []string) {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	for _, rel := range rels {
		if e := f.entries[rel]; e != nil && e.pins > 0 {
			e.pins--
		}
	}
	f.evictLocked(0, 0)
}

// admit writes a verified file into the cache, pinned for the load that asked for it.
// It makes room by evicting what no load needs; when loads in flight hold the rest, it
// refuses rather than pass the cache's bound.
func (f *packageFetcher) admit(rel string, data []byte) error {
	size := int64(len(data))
	f.cacheMu.Lock()
	if old := f.entries[rel]; old != nil && old.pins == 0 {
		f.total -= old.size
		delete(f.entries, rel)
	}
	f.evictLocked(size, 1)
	switch {
	case f.total+size > f.max:
		held := f.total
		f.cacheMu.Unlock()
		return boundErrorf("%s refused: the package cache is full (loads in flight hold %d MiB of its %d MiB; PackageCacheMaxBytes, SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX)",
			filepath.Base(rel), held>>20, f.max>>20)
	case len(f.entries)+1 > f.maxFile:
		f.cacheMu.Unlock()
		return boundErrorf("%s refused: the package cache is full (loads in flight hold its %d files; PackageCacheMaxFiles, SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX_FILES)",
			filepath.Base(rel), f.maxFile)
	}
	// Counted (and pinned) before it is written: a concurrent admit cannot take the room.
	e := f.entries[rel]
	if e == nil {
		e = &cacheEntry{size: size}
		f.entries[rel] = e
		f.total += size
	}
	e.pins++
	e.used = time.Now()
	f.cacheMu.Unlock()
	dir := filepath.Join(f.dir, filepath.Dir(rel))
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		_ = os.Chmod(dir, 0o755)
		err = writeAtomic(dir, filepath.Base(rel), data)
	}
	if err != nil {
		f.release([]string{rel})
	}
	return err
}

// evictLocked deletes the least recently used unpinned files until the cache has room
// for need more bytes in files more files. Files a load in flight needs stay.
func (f *packageFetcher) evictLocked(need int64, files int) {
	full := func() bool { return f.total+need > f.max || len(f.entries)+files > f.maxFile }
	if !full() {
		return
	}
	var free []string
	for rel, e := range f.entries {
		if e.pins == 0 {
			free = append(free, rel)
		}
	}
	sort.Slice(free, func(i, j int) bool { return f.entries[free[i]].used.Before(f.entries[free[j]].used) })
	for _, rel := range free {
		if !full() {
			return
		}
		p := filepath.Join(f.dir, rel)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if d := filepath.Dir(rel); d != "." {
			_ = os.Remove(filepath.Join(f.dir, d)) // a pip wheel's own directory, once empty
		}
		f.total -= f.entries[rel].size
		delete(f.entries, rel)
	}
}

// cacheBytes is what the cache holds, by the fetcher's account (tests, doctor).
func (f *packageFetcher) cacheBytes() int64 {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	return f.total
}

func normalize(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name))
}

// needed returns the packages (and their dependencies) that code's imports and names
// ask for, in a stable order.
func (f *packageFetcher) needed(code string, names []string) []string {
	want := map[string]bool{}
	var add func(string)
	add = func(n string) {
		n = normalize(n)
		if _, ok := f.pkgs[n]; !ok || want[n] {
			return
		}
		want[n] = true
		for _, d := range f.pkgs[n].Depends {
			add(d)
		}
	}
	for _, top := range importedModules(code) {
		if p, ok := f.imports[top]; ok {
			add(p)
		}
	}
	for _, n := range names {
		add(n)
	}
	out := make([]string, 0, len(want))
	for n := range want {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fetch brings a lock-file wheel into the cache and gives it to the load r.
func (f *packageFetcher) fetch(ctx context.Context, r *pkgRun, p lockPackage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if size, ok := f.use(p.FileName); ok {
		// Only verified wheels are ever written there.
		return r.giveCached(p.FileName, size)
	}
	data, err := os.ReadFile(filepath.Join(f.mirror, p.FileName))
	if err != nil {
		if err := r.fetched(); err != nil {
			return err
		}
		if r != nil && r.progress != nil {
			r.progress(p.Name)
		}
		if data, err = f.download(ctx, f.cdn+p.FileName, maxWheelBytes); err != nil {
			return err
		}
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, p.SHA256) {
		return fmt.Errorf("%s refused: its sha256 %s does not match the lock file's %s", p.FileName, got, p.SHA256)
	}
	if err := f.admit(p.FileName, data); err != nil {
		return err
	}
	return r.giveCached(p.FileName, int64(len(data)))
}

// download GETs a URL of the package sources, at most limit bytes.
func (f *packageFetcher) download(ctx context.Context, rawURL string, limit int64) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	src := u.Scheme + "://" + u.Host
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	f.requests.Add(1)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, &sourceError{fmt.Sprintf("the package source %s is unreachable (%v)", src, shortNetErr(err))}
	}
	defer resp.Body.Close()
	file := path.Base(u.Path)
	if resp.StatusCode != http.StatusOK {
		return nil, &httpStatusError{fmt.Sprintf("%s answered %s for %s", src, resp.Status, file), resp.StatusCode}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("download of %s: %v", file, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is over the %d MiB limit", file, limit>>20)
	}
	return data, nil
}

// sourceError is a package source that could not be reached at all.
type sourceError struct{ msg string }

func (e *sourceError) Error() string { return e.msg }

// unserved tells a package the source could not serve (unreachable, or an HTTP error)
// from one refused for a reason the user can act on (a bound, a checksum).
func unserved(err error) bool {
	var se *sourceError
	var he *httpStatusError
	return errors.As(err, &se) || errors.As(err, &he)
}

// unservedNote is the one line a run shows for the packages its source could not
// serve: no host, no error chain (the server's log has them), and the settings that
// fix it.
func unservedNote(names []string) string {
	return fmt.Sprintf("[sandbox] not available on this server: %s. The package source cannot be reached; an operator sets "+
		"SANDCHAT_SANDBOX_PACKAGE_CDN (official, or a mirror's URL) or SANDCHAT_SANDBOX_PACKAGE_DIR (a local mirror).", strings.Join(names, ", "))
}

type httpStatusError struct {
	msg    string
	status int
}

func (e *httpStatusError) Error() string { return e.msg }

func shortNetErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// writeAtomic writes name in dir so that readers see the whole file or none.
func writeAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// fetchedRequests is how many HTTP requests the fetcher has made (tests).
func (f *packageFetcher) fetchedRequests() int { return int(f.requests.Load()) }
