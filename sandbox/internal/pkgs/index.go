package pkgs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// micropip.install in a session asks the engine; the resolver here answers against a
// PyPI-style JSON API: for each requirement the newest version with a wheel the
// session's interpreter loads (one built for its platform before a pure-Python one, as
// pip prefers), its dependencies the same way, each wheel checked against the index's
// sha256 and size and fetched only from allowed hosts, with the fetcher and cache of
// the Pyodide distribution's wheels. Packages of that distribution are loaded from it
// instead.

const (
	maxRequirements = 64
	maxIndexBytes   = 16 << 20
	indexTTL        = 10 * time.Minute
	maxIndexEntries = 512
)

// Wheel is a wheel installed in a session; it is saved with the session so that a
// restore installs it again (from the cache, or fetched again and checked against
// SHA256 when the cache lost it).
type Wheel struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	File    string `json:"file"`
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size,omitempty"` // as the index gave it; 0 for unknown
}

// Rel is the wheel's path in the cache: one directory per content hash, so that two
// indexes serving different bytes under one file name never collide.
func (w Wheel) Rel() string { return filepath.Join("pip", w.SHA256, w.File) }

// Request is one micropip.install call.
type Request struct {
	Requirements []string `json:"requirements"`
	Deps         bool     `json:"deps"`
	KeepGoing    bool     `json:"keepGoing"`
	// Lock asks only for packages of the Pyodide distribution, as an import the
	// session's finder missed does: served even when installing is turned off.
	Lock bool `json:"lock"`
}

// Plan is what one install resolved to.
type Plan struct {
	Wheels []Wheel  // fetched, to install, dependencies first
	Lock   []string // Pyodide distribution packages to load instead
}

type indexEntry struct {
	at  time.Time
	doc *indexDoc
	err error
}

type indexFile struct {
	Filename    string            `json:"filename"`
	URL         string            `json:"url"`
	Digests     map[string]string `json:"digests"`
	PackageType string            `json:"packagetype"`
	Size        int64             `json:"size"`
	Yanked      bool              `json:"yanked"`
}

type indexDoc struct {
	Info struct {
		Name         string   `json:"name"`
		Version      string   `json:"version"`
		RequiresDist []string `json:"requires_dist"`
	} `json:"info"`
	URLs     []indexFile            `json:"urls"`
	Releases map[string][]indexFile `json:"releases"`
}

const pipOffMsg = "installing packages is turned off in this sandbox; the packages of its Pyodide distribution can still be imported"

// Install resolves req and gives every wheel it needs to the load r (in the cache,
// pinned, and in the session's view). have names the projects the session already
// installed.
func (f *Fetcher) Install(ctx context.Context, r *Load, req Request, have map[string]bool) (*Plan, error) {
	cfg := f.cfg
	if cfg.PipOff && !req.Lock {
		return nil, Errorf(pipOffMsg)
	}
	if len(req.Requirements) == 0 || len(req.Requirements) > maxRequirements {
		return nil, Errorf("micropip.install takes 1 to %d requirements", maxRequirements)
	}
	if r != nil {
		r.mu.Lock()
		r.indexLeft = cfg.PipMaxIndexRequests
		r.mu.Unlock()
	}
	plan := &Plan{}
	var errs []string
	fail := func(err error) bool {
		errs = append(errs, err.Error())
		return !req.KeepGoing
	}
	var queue []Requirement
	for _, s := range req.Requirements {
		p, err := ParseRequirement(s)
		if err != nil {
			if fail(err) {
				break
			}
			continue
		}
		queue = append(queue, p)
	}
	seen := map[string]bool{}
	var bytes int64
	for len(queue) > 0 && (len(errs) == 0 || req.KeepGoing) {
		it := queue[0]
		queue = queue[1:]
		name := Normalize(it.Name)
		if seen[name] || have[name] {
			continue
		}
		seen[name] = true
		if lp, ok := f.pkgs[name]; ok {
			// The Pyodide distribution has it (built for this interpreter): use that.
			plan.Lock = append(plan.Lock, lp.Name)
			continue
		}
		if req.Lock {
			fail(Errorf("%s is not a package of this sandbox's Pyodide distribution", it.Name))
			continue
		}
		if !f.allowed(name) {
			fail(Errorf("%s is not on this sandbox's list of installable packages", it.Name))
			continue
		}
		if len(plan.Wheels) >= cfg.PipMaxPackages {
			fail(Errorf("an install may fetch at most %d packages (dependencies included)", cfg.PipMaxPackages))
			break
		}
		w, deps, err := f.resolve(ctx, r, it)
		if err != nil {
			if fail(err) || IsBound(err) {
				break
			}
			continue
		}
		if bytes += w.Size; bytes > cfg.PipMaxBytes {
			fail(Errorf("an install may download at most %d MiB", cfg.PipMaxBytes>>20))
			break
		}
		plan.Wheels = append(plan.Wheels, w)
		if req.Deps {
			queue = append(queue, deps...)
		}
	}
	if len(errs) > 0 {
		return nil, &Error{Msg: strings.Join(errs, "; ")}
	}
	// Every wheel is fetched before any is installed: an install is all or nothing.
	for _, w := range plan.Wheels {
		if err := f.FetchWheel(ctx, r, w, cfg.PipMaxBytes); err != nil {
			return nil, err
		}
	}
	// Dependencies are installed before what needs them.
	slices.Reverse(plan.Wheels)
	return plan, nil
}

func (f *Fetcher) allowed(name string) bool {
	for _, a := range f.cfg.PipAllow {
		if a == "*" || Normalize(a) == name {
			return true
		}
	}
	return false
}

// resolve picks the newest version that satisfies r and has a wheel the sessions'
// interpreter loads, and the best such wheel of it.
func (f *Fetcher) resolve(ctx context.Context, run *Load, r Requirement) (Wheel, []Requirement, error) {
	doc, err := f.indexDoc(ctx, run, r.Name)
	if err != nil {
		return Wheel{}, nil, err
	}
	w, err := f.platform.pick(doc, r)
	if err != nil {
		return Wheel{}, nil, err
	}
	requires := doc.Info.RequiresDist
	if w.Version != doc.Info.Version {
		// The project document describes its latest version only.
		if vd, err := f.indexDocAt(ctx, run, r.Name, w.Version); err == nil {
			requires = vd.Info.RequiresDist
		}
	}
	return w, dependencies(requires, MarkerEnv(f.python)), nil
}

// pick chooses, of the releases of the index's document doc that r allows, the newest
// with a wheel p loads, and its best wheel (Rank); or says why there is none.
func (p Platform) pick(doc *indexDoc, r Requirement) (Wheel, error) {
	releases := doc.Releases
	if len(releases) == 0 {
		releases = map[string][]indexFile{doc.Info.Version: doc.URLs}
	}
	versions := make([]string, 0, len(releases))
	for v := range releases {
		if r.SatisfiedBy(v) {
			versions = append(versions, v)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return CompareVersions(versions[i], versions[j]) > 0 })
	otherPlatform := ""
	for _, v := range versions {
		var best *indexFile
		rank := -1
		for i, file := range releases[v] {
			if file.Yanked || !strings.HasSuffix(file.Filename, ".whl") {
				continue
			}
			if k := p.Rank(file.Filename); k > rank {
				best, rank = &releases[v][i], k
			} else if k < 0 {
				otherPlatform = v
			}
		}
		if best == nil {
			continue
		}
		sum := strings.ToLower(best.Digests["sha256"])
		if !hexSHA256.MatchString(sum) || !wheelName.MatchString(best.Filename) || best.Size < 0 {
			return Wheel{}, Errorf("the index gives no usable sha256 and file name for %s %s", r.Name, v)
		}
		w := Wheel{Name: doc.Info.Name, Version: v, File: best.Filename, URL: best.URL, SHA256: sum, Size: best.Size}
		if w.Name == "" {
			w.Name = r.Name
		}
		return w, nil
	}
	where := "compiled packages need a wheel built for Pyodide (" + p.String() + "), or come from the Pyodide distribution: import them directly, or ask the operator to add them to the package mirror"
	if otherPlatform != "" {
		return Wheel{}, Errorf("no wheel of %s %s loads in this sandbox; %s", r.Name, otherPlatform, where)
	}
	if len(versions) == 0 {
		return Wheel{}, Errorf("no version of %s matches %q", r.Name, r.Spec)
	}
	return Wheel{}, Errorf("no wheel of %s loads in this sandbox; %s", r.Name, where)
}

// dependencies are the requirements of a release's requires (PEP 508 strings) that
// apply in env: extras, other platforms and what this engine cannot read are left out.
func dependencies(requires []string, env map[string]string) []Requirement {
	var deps []Requirement
	for _, rd := range requires {
		d, err := ParseRequirement(rd)
		if err != nil {
			continue
		}
		if d.Marker != "" {
			if ok, err := EvalMarker(d.Marker, env); err != nil || !ok {
				continue
			}
		}
		deps = append(deps, d)
	}
	return deps
}

func (f *Fetcher) indexDoc(ctx context.Context, r *Load, name string) (*indexDoc, error) {
	return f.cachedIndex(ctx, r, url.PathEscape(Normalize(name))+"/json")
}

func (f *Fetcher) indexDocAt(ctx context.Context, r *Load, name, version string) (*indexDoc, error) {
	return f.cachedIndex(ctx, r, url.PathEscape(Normalize(name))+"/"+url.PathEscape(version)+"/json")
}

// cachedIndex asks the index, keeping answers a few minutes: sessions installing the
// same package in a row ask once. Each question asked counts against r's bounds.
func (f *Fetcher) cachedIndex(ctx context.Context, r *Load, rel string) (*indexDoc, error) {
	f.indexMu.Lock()
	if e, ok := f.index[rel]; ok && time.Since(e.at) < indexTTL {
		f.indexMu.Unlock()
		return e.doc, e.err
	}
	f.indexMu.Unlock()
	if err := r.indexAsked(); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(f.cfg.PipIndex, "/") + "/"
	raw, err := f.download(ctx, base+rel, maxIndexBytes)
	var doc *indexDoc
	if err != nil {
		var se *httpStatusError
		if errors.As(err, &se) && se.status == 404 {
			err = &Error{Msg: fmt.Sprintf("%s is not on the package index", strings.Split(rel, "/")[0]), NotIndexed: true}
		} else {
			err = Errorf("the package index could not be read: %v", err)
		}
	} else {
		doc = &indexDoc{}
		if jerr := json.Unmarshal(raw, doc); jerr != nil {
			doc, err = nil, Errorf("the package index answered something that is not its JSON API for %s", strings.Split(rel, "/")[0])
		}
	}
	var se *Error
	if err == nil || errors.As(err, &se) && se.NotIndexed {
		f.indexMu.Lock()
		if len(f.index) >= maxIndexEntries {
			clear(f.index)
		}
		f.index[rel] = indexEntry{at: time.Now(), doc: doc, err: err}
		f.indexMu.Unlock()
	}
	return doc, err
}

// FetchWheel brings w into the cache, checked against its sha256 (and its size when
// the index gave one), and gives it to r. A download is at most limit bytes.
func (f *Fetcher) FetchWheel(ctx context.Context, r *Load, w Wheel, limit int64) error {
	if !hexSHA256.MatchString(w.SHA256) || !wheelName.MatchString(w.File) {
		return Errorf("%s: bad wheel record", w.Name)
	}
	if size, ok := f.use(w.Rel()); ok {
		return r.giveCached(w.Rel(), size)
	}
	u, err := url.Parse(w.URL)
	if err != nil || !f.hostAllowed(u) {
		return Errorf("%s refused: %s is not an allowed package host", w.File, hostOf(w.URL))
	}
	if err := r.fetched(); err != nil {
		return err
	}
	data, err := f.download(ctx, w.URL, min(limit, MaxWheelBytes))
	if err != nil {
		return Errorf("%s: %v", w.File, err)
	}
	if w.Size > 0 && int64(len(data)) != w.Size {
		return Errorf("%s refused: %d bytes where the index says %d", w.File, len(data), w.Size)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != w.SHA256 {
		return Errorf("%s refused: its sha256 %s does not match the index's %s", w.File, got, w.SHA256)
	}
	if err := f.admit(w.Rel(), data); err != nil {
		return err
	}
	return r.giveCached(w.Rel(), int64(len(data)))
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Host
	}
	return "?"
}
