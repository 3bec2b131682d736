// Package pkgs serves Python packages into sandbox sessions without giving them the
// network. Before a run, the engine resolves the code's imports with Pyodide's lock
// file, fetches the wheels missing from the cache directory (from the package mirror if
// it has them, else from the CDN), checks each against the lock's sha256 and writes it
// atomically; micropip.install in a session resolves requirements against a PyPI-style
// JSON index the same way (index.go). The cache is shared by every session's loads,
// survives restarts and is bounded in files and bytes (cache.go); a session reads only
// its own view of it, holding what its current load asked for (load.go).
//
// What is pure (requirements, versions, markers, wheel tags, import statements) has no
// state; the Fetcher owns the cache and one lock per concern.
package pkgs

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
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Provided are the top-level modules every session has from its driver
// (runtime/driver.py, `provided`): sandchat's own micropip, which installs through the
// engine, and IPython, whose display module the driver shims. No package of the
// distribution is fetched for them: `from IPython.display import HTML` needs nothing.
var Provided = []string{"micropip", "IPython"}

// MaxWheelBytes bounds one download: the largest Pyodide packages are tens of MB.
const MaxWheelBytes = 512 << 20

// Settings are the sandbox's package settings, described once: sandbox.Config embeds
// them, its operators set them (their environment variables are the sandbox's; errors
// quote their names), and the fetcher reads them as they are.
type Settings struct {
	PackageDir string // a mirror of the Pyodide distribution (pyodide-lock.json + wheels); defaults to PyodideDir
	// PackageCDN is the base URL of the Pyodide distribution the engine fetches wheels
	// from: sandbox.CDNOfficial (the default) stands for the official one of the pinned
	// Pyodide, sandbox.CDNOff or "" for none (only what PackageDir holds loads);
	// sandbox.Locate turns the words into a URL (or "") before the fetcher reads it.
	PackageCDN string
	// PackageCacheDir keeps the wheels fetched from PackageCDN, verified against the lock
	// file's sha256, and kept across restarts; each session reads only its own view of it,
	// holding the wheels its current run loads.
	PackageCacheDir string
	// PackageCacheMaxBytes and PackageCacheMaxFiles bound the cache: past them the least
	// recently used wheels that no load in flight needs are deleted, and a fetch that
	// would pass them while loads in flight hold the rest is refused.
	PackageCacheMaxBytes int64
	PackageCacheMaxFiles int
	// What one run (and one session process, over its life) may have made available
	// to it from the cache, and how many downloads (wheels and index documents) it may
	// cause; past a bound the fetch is refused with a message naming the setting.
	PackageRunMaxFiles       int
	PackageRunMaxBytes       int64
	PackageRunMaxFetches     int
	PackageSessionMaxFiles   int
	PackageSessionMaxBytes   int64
	PackageSessionMaxFetches int

	// micropip.install inside sessions is served by the engine (sessions have no network):
	// pure-Python wheels from a PyPI-style JSON API, sha256-verified, cached with the rest.
	PipOff         bool     // no installs at all
	PipIndex       string   // base URL of the JSON API: <PipIndex><name>/json
	PipAllow       []string // installable project names, or "*" for any
	PipHosts       []string // hosts wheels may come from besides the index's own
	PipMaxPackages int      // wheels one install may fetch, dependencies included
	PipMaxBytes    int64    // bytes one install may download
	// PipMaxIndexRequests bounds the index documents one install may ask for.
	PipMaxIndexRequests int
}

// Fetcher brings packages into the cache and hands them to loads.
type Fetcher struct {
	log    *slog.Logger // what users are not shown: hosts and errors of package sources
	cdn    string       // with a trailing slash; empty: lock-file wheels are not fetched
	mirror string       // PackageDir: its wheels win over the CDN
	dir    string       // the cache directory: pyodide-lock.json + verified wheels
	client *http.Client
	cfg    Settings

	pkgs     map[string]lockPackage // normalized name -> package
	imports  map[string]string      // top-level import name -> package
	python   string                 // the interpreter's version, for dependency markers
	platform Platform               // what compiled wheels the interpreter loads

	mu       sync.Mutex // one lock-file fetch at a time: a wheel is fetched once, not by every waiting run
	requests atomic.Int64

	cacheMu sync.Mutex
	entries map[string]*cacheEntry // path relative to dir -> entry
	total   int64
	max     int64
	maxFile int

	indexMu sync.Mutex
	index   map[string]indexEntry // pip index answers, kept a few minutes

	sourceMu sync.Mutex // guards the two fields below
	sourceOK bool       // whether the package source answered, when last asked or used
	sourceAt time.Time  // when; zero: never
}

type lockPackage struct {
	Name     string   `json:"name"`
	FileName string   `json:"file_name"`
	SHA256   string   `json:"sha256"`
	Imports  []string `json:"imports"`
	Depends  []string `json:"depends"`
}

// New reads the lock file of cfg.PackageDir and the cache cfg.PackageCacheDir holds.
func New(cfg Settings, log *slog.Logger) (*Fetcher, error) {
	f := &Fetcher{log: log, mirror: cfg.PackageDir, dir: cfg.PackageCacheDir, cfg: cfg, max: cfg.PackageCacheMaxBytes, maxFile: cfg.PackageCacheMaxFiles,
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
			Python     string `json:"python"`
			ABIVersion string `json:"abi_version"`
			Arch       string `json:"arch"`
			Platform   string `json:"platform"`
		} `json:"info"`
		Packages map[string]lockPackage `json:"packages"`
	}
	if err == nil {
		if err := json.Unmarshal(raw, &lock); err != nil {
			return nil, fmt.Errorf("package lock file: %w", err)
		}
	}
	f.python = lock.Info.Python
	f.platform = NewPlatform(lock.Info.Python, lock.Info.ABIVersion, lock.Info.Arch, lock.Info.Platform)
	if err := os.MkdirAll(cfg.PackageCacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	// Session processes may run as another user: the cache must be readable to them.
	_ = os.Chmod(cfg.PackageCacheDir, 0o755)
	if raw != nil {
		if err := WriteAtomic(cfg.PackageCacheDir, "pyodide-lock.json", raw); err != nil {
			return nil, fmt.Errorf("package cache: %w", err)
		}
	}
	for key, p := range lock.Packages {
		if p.FileName == "" || filepath.Base(p.FileName) != p.FileName {
			continue // absolute URLs and paths are not served from here
		}
		f.pkgs[Normalize(key)] = p
		for _, imp := range p.Imports {
			if slices.Contains(Provided, imp) {
				continue
			}
			f.imports[imp] = Normalize(key)
		}
	}
	f.scanCache()
	return f, nil
}

// CDN is where lock-file wheels come from, "" when they are not fetched.
func (f *Fetcher) CDN() string { return f.cdn }

// Dir is the cache directory.
func (f *Fetcher) Dir() string { return f.dir }

// Platform is what compiled wheels the sessions' interpreter loads.
func (f *Fetcher) Platform() Platform { return f.platform }

// Requests is how many HTTP requests the fetcher has made.
func (f *Fetcher) Requests() int { return int(f.requests.Load()) }

// Package names the lock-file package that provides the top-level module, or "".
func (f *Fetcher) Package(module string) string {
	top, _, _ := strings.Cut(module, ".")
	if p, ok := f.imports[top]; ok {
		return f.pkgs[p].Name
	}
	return ""
}

// needed returns the packages (and their dependencies) that code's imports and names
// ask for, in a stable order.
func (f *Fetcher) needed(code string, names []string) []string {
	want := map[string]bool{}
	var add func(string)
	add = func(n string) {
		n = Normalize(n)
		if _, ok := f.pkgs[n]; !ok || want[n] {
			return
		}
		want[n] = true
		for _, d := range f.pkgs[n].Depends {
			add(d)
		}
	}
	for _, top := range ImportedModules(code) {
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

// How long what Loadable found of the package source holds: a source that answered
// rarely goes, one that did not may come back soon.
const (
	sourceUpFor   = 10 * time.Minute
	sourceDownFor = time.Minute
	sourceAskFor  = 3 * time.Second // how long a look at the source may take
)

// Loadable tells whether a session could load package name (as the lock file names it)
// now: it and what it depends on are in the package mirror or the cache, or come from
// a package source that answers. Whether the source answers is asked once (a HEAD of
// the package's wheel, within a few seconds) and remembered a while; every download
// tells it again. A deployment without the data stack says so before code needs it.
func (f *Fetcher) Loadable(ctx context.Context, name string) bool {
	p, ok := f.pkgs[Normalize(name)]
	if !ok {
		return false
	}
	missing := false
	for _, n := range f.needed("", []string{name}) {
		file := f.pkgs[n].FileName
		if !fileExists(filepath.Join(f.mirror, file)) && !f.cached(file) {
			missing = true
			break
		}
	}
	if !missing {
		return true
	}
	if f.cdn == "" {
		return false
	}
	f.sourceMu.Lock()
	known, up, at := !f.sourceAt.IsZero(), f.sourceOK, f.sourceAt
	f.sourceMu.Unlock()
	if known && time.Since(at) < map[bool]time.Duration{true: sourceUpFor, false: sourceDownFor}[up] {
		return up
	}
	ctx, cancel := context.WithTimeout(ctx, sourceAskFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, f.cdn+p.FileName, nil)
	if err != nil {
		return false
	}
	f.requests.Add(1)
	resp, err := f.client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	up = err == nil && resp.StatusCode == http.StatusOK
	f.noteSource(up)
	return up
}

// cached tells whether the cache holds rel, without touching its place in the LRU.
func (f *Fetcher) cached(rel string) bool {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	return f.entries[rel] != nil || fileExists(filepath.Join(f.dir, rel))
}

// noteSource remembers whether the package source answered.
func (f *Fetcher) noteSource(up bool) {
	f.sourceMu.Lock()
	defer f.sourceMu.Unlock()
	f.sourceOK, f.sourceAt = up, time.Now()
}

// fetch brings a lock-file wheel into the cache and gives it to the load r.
func (f *Fetcher) fetch(ctx context.Context, r *Load, p lockPackage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if size, ok := f.use(p.FileName); ok {
		// Only verified wheels are ever written there.
		return r.giveCached(p.FileName, size)
	}
	data, err := os.ReadFile(filepath.Join(f.mirror, p.FileName))
	if err != nil {
		if r.gaveUp() {
			return &sourceError{"the package source did not answer earlier in this load"}
		}
		if err := r.fetched(); err != nil {
			return err
		}
		if r != nil && r.Progress != nil {
			r.Progress(p.Name)
		}
		if data, err = f.download(ctx, f.cdn+p.FileName, MaxWheelBytes); err != nil {
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

// hostAllowed tells whether the fetcher may download from u: the index's host and the
// configured file hosts (and the Pyodide CDN).
func (f *Fetcher) hostAllowed(u *url.URL) bool {
	if u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	hosts := append([]string{}, f.cfg.PipHosts...)
	for _, base := range []string{f.cfg.PipIndex, f.cfg.PackageCDN} {
		if b, err := url.Parse(base); err == nil && b.Host != "" {
			hosts = append(hosts, b.Host)
		}
	}
	for _, h := range hosts {
		if strings.EqualFold(h, u.Host) || strings.EqualFold(h, u.Hostname()) && u.Port() == "" {
			return true
		}
	}
	return false
}

// download GETs a URL of the package sources, at most limit bytes.
func (f *Fetcher) download(ctx context.Context, rawURL string, limit int64) ([]byte, error) {
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
		f.noteSource(false)
		return nil, &sourceError{fmt.Sprintf("the package source %s is unreachable (%v)", src, shortNetErr(err))}
	}
	f.noteSource(true)
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

// WriteAtomic writes name in dir so that readers see the whole file or none.
func WriteAtomic(dir, name string, data []byte) error {
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

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
