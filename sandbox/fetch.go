package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// packageFetcher serves packages into sessions without giving them the network: before
// a run, the engine resolves the code's imports with the lock file, fetches the wheels
// that are missing from the cache directory (from the package mirror if it has them,
// else from the CDN), checks each against the lock's sha256, and writes it atomically.
// Sessions read the cache directory read-only; it is shared by every session and
// survives restarts.
type packageFetcher struct {
	cdn    string // with a trailing slash
	mirror string // PackageDir: its wheels win over the CDN
	dir    string // the cache directory: pyodide-lock.json + verified wheels
	client *http.Client

	pkgs    map[string]lockPackage // normalized name -> package
	imports map[string]string      // top-level import name -> package

	mu       sync.Mutex // one fetch at a time: a wheel is fetched once, not by every waiting run
	requests int        // HTTP requests made, for tests and the doctor
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

func newPackageFetcher(cfg Config) (*packageFetcher, error) {
	raw, err := os.ReadFile(filepath.Join(cfg.PackageDir, "pyodide-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("package lock file: %w", err)
	}
	var lock struct {
		Packages map[string]lockPackage `json:"packages"`
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		return nil, fmt.Errorf("package lock file: %w", err)
	}
	if err := os.MkdirAll(cfg.PackageCacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	// Session processes may run as another user: the cache must be readable to them.
	_ = os.Chmod(cfg.PackageCacheDir, 0o755)
	if err := writeAtomic(cfg.PackageCacheDir, "pyodide-lock.json", raw); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	f := &packageFetcher{cdn: strings.TrimSuffix(cfg.PackageCDN, "/") + "/", mirror: cfg.PackageDir, dir: cfg.PackageCacheDir,
		client: &http.Client{Timeout: 5 * time.Minute}, pkgs: map[string]lockPackage{}, imports: map[string]string{}}
	for key, p := range lock.Packages {
		if p.FileName == "" || filepath.Base(p.FileName) != p.FileName {
			continue // absolute URLs and paths are not served from here
		}
		f.pkgs[normalize(key)] = p
		for _, imp := range p.Imports {
			f.imports[imp] = normalize(key)
		}
	}
	return f, nil
}

func normalize(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name))
}

var importRe = regexp.MustCompile(`(?m)^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*))`)

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
	for _, m := range importRe.FindAllStringSubmatch(code, -1) {
		mods := m[1]
		if mods == "" {
			mods = m[2]
		}
		for _, mod := range strings.Split(mods, ",") {
			top, _, _ := strings.Cut(strings.TrimSpace(mod), ".")
			if p, ok := f.imports[top]; ok {
				add(p)
			}
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

// ensure puts the packages code needs into the cache; it returns one note per package
// that could not be served, for the run's stderr.
func (f *packageFetcher) ensure(ctx context.Context, code string, names []string) []string {
	var notes []string
	for _, n := range f.needed(code, names) {
		if err := f.fetch(ctx, f.pkgs[n]); err != nil {
			notes = append(notes, fmt.Sprintf("[sandbox] package %s could not be loaded: %v", f.pkgs[n].Name, err))
		}
	}
	return notes
}

func (f *packageFetcher) fetch(ctx context.Context, p lockPackage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fileExists(filepath.Join(f.dir, p.FileName)) {
		return nil // only verified wheels are ever written there
	}
	data, err := os.ReadFile(filepath.Join(f.mirror, p.FileName))
	if err != nil {
		if data, err = f.download(ctx, p.FileName); err != nil {
			return err
		}
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, p.SHA256) {
		return fmt.Errorf("%s refused: its sha256 %s does not match the lock file's %s", p.FileName, got, p.SHA256)
	}
	return writeAtomic(f.dir, p.FileName, data)
}

func (f *packageFetcher) download(ctx context.Context, file string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.cdn+file, nil)
	if err != nil {
		return nil, err
	}
	f.requests++
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the package source %s is unreachable (%v)", f.cdn, shortNetErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s for %s", f.cdn, resp.Status, file)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxWheelBytes+1))
	if err != nil {
		return nil, fmt.Errorf("download of %s: %v", file, err)
	}
	if len(data) > maxWheelBytes {
		return nil, fmt.Errorf("%s is over %d MiB", file, maxWheelBytes>>20)
	}
	return data, nil
}

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
func (f *packageFetcher) fetchedRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}
