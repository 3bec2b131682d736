package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
)

// micropip.install in a session asks the engine (a "pip" frame during a run); the
// engine resolves the requirements against a PyPI-style JSON API, fetches pure-Python
// wheels with the same fetcher and cache as the Pyodide distribution's, verifies their
// sha256 against the index's digests, and answers with the cached paths, which the
// session installs from its read-only view of the cache. The session never gets the
// network.

var (
	projectName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$`)
	moduleName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}$`)
	wheelName   = regexp.MustCompile(`^[A-Za-z0-9._+-]{1,200}\.whl$`)
	hexSHA256   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	requirement = regexp.MustCompile(`^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*\(?\s*([^;()]*?)\s*\)?\s*(?:;(.*))?$`)
)

const (
	maxPreload        = 64
	maxRequirements   = 64
	maxIndexBytes     = 16 << 20
	indexTTL          = 10 * time.Minute
	maxIndexEntries   = 512
	pipRequestTimeout = 2 * time.Minute
)

// pipWheel is a wheel installed in a session; it is saved with the session so that a
// restore installs it again (from the cache, or fetched again and checked against
// SHA256 when the cache lost it).
type pipWheel struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	File    string `json:"file"`
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
}

// rel is the wheel's path in the cache: one directory per content hash, so that two
// indexes serving different bytes under one file name never collide.
func (w pipWheel) rel() string { return filepath.Join("pip", w.SHA256, w.File) }

type pipRequest struct {
	Requirements []string `json:"requirements"`
	Deps         bool     `json:"deps"`
	KeepGoing    bool     `json:"keepGoing"`
}

// pipPlan is what one install resolved to.
type pipPlan struct {
	wheels []pipWheel // to fetch and install, dependencies first
	lock   []string   // Pyodide distribution packages to load instead
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

// pipError is a refusal the user sees as is.
type pipError struct {
	msg   string
	bound bool // at one of the package bounds (pkgview.go)
}

func (e *pipError) Error() string { return e.msg }

func pipErrorf(format string, a ...any) error { return &pipError{msg: fmt.Sprintf(format, a...)} }

// install resolves req and gives every wheel it needs to the load r (in the cache,
// pinned, and in the session's view). have names the projects the session already
// installed.
func (f *packageFetcher) install(ctx context.Context, r *pkgRun, req pipRequest, have map[string]bool) (*pipPlan, error) {
	cfg := f.cfg
	if cfg.PipOff {
		return nil, pipErrorf("installing packages is turned off in this sandbox; the packages of its Pyodide distribution can still be imported")
	}
	if len(req.Requirements) == 0 || len(req.Requirements) > maxRequirements {
		return nil, pipErrorf("micropip.install takes 1 to %d requirements", maxRequirements)
	}
	r.mu.Lock()
	r.indexLeft = cfg.PipMaxIndexRequests
	r.mu.Unlock()
	plan := &pipPlan{}
	var errs []string
	fail := func(err error) bool {
		errs = append(errs, err.Error())
		return !req.KeepGoing
	}
	type item struct {
		req  parsedReq
		from string
	}
	var queue []item
	for _, r := range req.Requirements {
		p, err := parseRequirement(r)
		if err != nil {
			if fail(err) {
				break
			}
			continue
		}
		queue = append(queue, item{req: p})
	}
	seen := map[string]bool{}
	var bytes int64
	for len(queue) > 0 && (len(errs) == 0 || req.KeepGoing) {
		it := queue[0]
		queue = queue[1:]
		name := normalize(it.req.name)
		if seen[name] || have[name] {
			continue
		}
		seen[name] = true
		if lp, ok := f.pkgs[name]; ok {
			// The Pyodide distribution has it (built for this interpreter): use that.
			plan.lock = append(plan.lock, lp.Name)
			continue
		}
		if !f.allowed(name) {
			fail(pipErrorf("%s is not on this sandbox's list of installable packages", it.req.name))
			continue
		}
		if len(plan.wheels) >= cfg.PipMaxPackages {
			fail(pipErrorf("an install may fetch at most %d packages (dependencies included)", cfg.PipMaxPackages))
			break
		}
		w, deps, size, err := f.resolve(ctx, r, it.req)
		if err != nil {
			if fail(err) || isBound(err) {
				break
			}
			continue
		}
		if bytes += size; bytes > cfg.PipMaxBytes {
			fail(pipErrorf("an install may download at most %d MiB", cfg.PipMaxBytes>>20))
			break
		}
		plan.wheels = append(plan.wheels, w)
		if req.Deps {
			for _, d := range deps {
				queue = append(queue, item{req: d, from: w.Name})
			}
		}
	}
	if len(errs) > 0 {
		return nil, &pipError{msg: strings.Join(errs, "; ")}
	}
	// Every wheel is fetched before any is installed: an install is all or nothing.
	for _, w := range plan.wheels {
		if err := f.fetchWheel(ctx, r, w, cfg.PipMaxBytes); err != nil {
			return nil, err
		}
	}
	// Dependencies are installed before what needs them.
	slices.Reverse(plan.wheels)
	return plan, nil
}

func (f *packageFetcher) allowed(name string) bool {
	for _, a := range f.cfg.PipAllow {
		if a == "*" || normalize(a) == name {
			return true
		}
	}
	return false
}

// hostAllowed tells whether the engine may download from u: the index's host and the
// configured file hosts (and the Pyodide CDN).
func (f *packageFetcher) hostAllowed(u *url.URL) bool {
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

// resolve picks the newest version that satisfies r and has a pure-Python wheel.
func (f *packageFetcher) resolve(ctx context.Context, run *pkgRun, r parsedReq) (pipWheel, []parsedReq, int64, error) {
	doc, err := f.indexDoc(ctx, run, r.name)
	if err != nil {
		return pipWheel{}, nil, 0, err
	}
	releases := doc.Releases
	if len(releases) == 0 {
		releases = map[string][]indexFile{doc.Info.Version: doc.URLs}
	}
	versions := make([]string, 0, len(releases))
	for v := range releases {
		if r.satisfiedBy(v) {
			versions = append(versions, v)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return compareVersions(versions[i], versions[j]) > 0 })
	compiledOnly := ""
	for _, v := range versions {
		var pure *indexFile
		for i, file := range releases[v] {
			if file.Yanked || !strings.HasSuffix(file.Filename, ".whl") {
				continue
			}
			if pureWheel(file.Filename) {
				pure = &releases[v][i]
				break
			}
			compiledOnly = v
		}
		if pure == nil {
			continue
		}
		sum := strings.ToLower(pure.Digests["sha256"])
		if !hexSHA256.MatchString(sum) || !wheelName.MatchString(pure.Filename) {
			return pipWheel{}, nil, 0, pipErrorf("the index gives no usable sha256 and file name for %s %s", r.name, v)
		}
		w := pipWheel{Name: doc.Info.Name, Version: v, File: pure.Filename, URL: pure.URL, SHA256: sum}
		if w.Name == "" {
			w.Name = r.name
		}
		requires := doc.Info.RequiresDist
		if v != doc.Info.Version {
			// The project document describes its latest version only.
			if vd, err := f.indexDocAt(ctx, run, r.name, v); err == nil {
				requires = vd.Info.RequiresDist
			}
		}
		var deps []parsedReq
		for _, rd := range requires {
			d, err := parseRequirement(rd)
			if err != nil {
				continue
			}
			if d.marker != "" {
				ok, err := evalMarker(d.marker, f.markerEnv())
				if err != nil || !ok {
					continue // extras, other platforms, and markers this engine cannot read
				}
			}
			deps = append(deps, d)
		}
		return w, deps, pure.Size, nil
	}
	if compiledOnly != "" {
		return pipWheel{}, nil, 0, pipErrorf("no pure-Python wheel for %s %s; compiled packages come from the Pyodide distribution: import them directly, or ask the operator to add them to the package mirror", r.name, compiledOnly)
	}
	if len(versions) == 0 {
		return pipWheel{}, nil, 0, pipErrorf("no version of %s matches %q", r.name, r.spec)
	}
	return pipWheel{}, nil, 0, pipErrorf("no pure-Python wheel for %s; compiled packages come from the Pyodide distribution: import them directly, or ask the operator to add them to the package mirror", r.name)
}

func pureWheel(file string) bool {
	parts := strings.Split(strings.TrimSuffix(file, ".whl"), "-")
	if len(parts) < 5 {
		return false
	}
	py, abi, plat := parts[len(parts)-3], parts[len(parts)-2], parts[len(parts)-1]
	if abi != "none" || plat != "any" {
		return false
	}
	for _, t := range strings.Split(py, ".") {
		if t == "py3" || strings.HasPrefix(t, "py3") {
			return true
		}
	}
	return false
}

func (f *packageFetcher) indexDoc(ctx context.Context, r *pkgRun, name string) (*indexDoc, error) {
	return f.cachedIndex(ctx, r, url.PathEscape(normalize(name))+"/json")
}

func (f *packageFetcher) indexDocAt(ctx context.Context, r *pkgRun, name, version string) (*indexDoc, error) {
	return f.cachedIndex(ctx, r, url.PathEscape(normalize(name))+"/"+url.PathEscape(version)+"/json")
}

// cachedIndex asks the index, keeping answers a few minutes: sessions installing the
// same package in a row ask once. Each question asked counts against r's bounds.
func (f *packageFetcher) cachedIndex(ctx context.Context, r *pkgRun, rel string) (*indexDoc, error) {
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
			err = pipErrorf("%s is not on the package index", strings.Split(rel, "/")[0])
		} else {
			err = pipErrorf("the package index could not be read: %v", err)
		}
	} else {
		doc = &indexDoc{}
		if jerr := json.Unmarshal(raw, doc); jerr != nil {
			doc, err = nil, pipErrorf("the package index answered something that is not its JSON API for %s", strings.Split(rel, "/")[0])
		}
	}
	var se *pipError
	if err == nil || errors.As(err, &se) && strings.Contains(se.msg, "not on the package index") {
		f.indexMu.Lock()
		if len(f.index) >= maxIndexEntries {
			clear(f.index)
		}
		f.index[rel] = indexEntry{at: time.Now(), doc: doc, err: err}
		f.indexMu.Unlock()
	}
	return doc, err
}

// fetchWheel brings w into the cache, checked against its sha256, and gives it to r.
func (f *packageFetcher) fetchWheel(ctx context.Context, r *pkgRun, w pipWheel, limit int64) error {
	if !hexSHA256.MatchString(w.SHA256) || !wheelName.MatchString(w.File) {
		return pipErrorf("%s: bad wheel record", w.Name)
	}
	if size, ok := f.use(w.rel()); ok {
		return r.giveCached(w.rel(), size)
	}
	u, err := url.Parse(w.URL)
	if err != nil || !f.hostAllowed(u) {
		return pipErrorf("%s refused: %s is not an allowed package host", w.File, hostOf(w.URL))
	}
	if err := r.fetched(); err != nil {
		return err
	}
	data, err := f.download(ctx, w.URL, min(limit, maxWheelBytes))
	if err != nil {
		return pipErrorf("%s: %v", w.File, err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != w.SHA256 {
		return pipErrorf("%s refused: its sha256 %s does not match the index's %s", w.File, got, w.SHA256)
	}
	if err := f.admit(w.rel(), data); err != nil {
		return err
	}
	return r.giveCached(w.rel(), int64(len(data)))
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Host
	}
	return "?"
}

// ---- requirements, versions and markers ----

type parsedReq struct {
	name   string
	spec   string
	specs  [][2]string // operator, version
	marker string
}

func parseRequirement(s string) (parsedReq, error) {
	if len(s) > 500 || strings.Contains(s, "@") || strings.Contains(s, "://") {
		return parsedReq{}, pipErrorf("requirement %.80q is not supported: give a name with optional version specifiers (URLs and local files are not)", s)
	}
	m := requirement.FindStringSubmatch(s)
	if m == nil || !projectName.MatchString(m[1]) {
		return parsedReq{}, pipErrorf("requirement %.80q is not a project name with optional version specifiers", s)
	}
	r := parsedReq{name: m[1], spec: strings.TrimSpace(m[3]), marker: strings.TrimSpace(m[4])}
	if r.spec != "" {
		for _, part := range strings.Split(r.spec, ",") {
			part = strings.TrimSpace(part)
			op := ""
			for _, o := range []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"} {
				if strings.HasPrefix(part, o) {
					op = o
					break
				}
			}
			v := strings.TrimSpace(strings.TrimPrefix(part, op))
			if op == "" || v == "" {
				return parsedReq{}, pipErrorf("version specifier %q of %s is not supported", part, r.name)
			}
			r.specs = append(r.specs, [2]string{op, v})
		}
	}
	return r, nil
}

// satisfiedBy applies the specifiers; pre-releases only count when a specifier names one.
func (r parsedReq) satisfiedBy(v string) bool {
	pre := isPre(v)
	for _, s := range r.specs {
		op, want := s[0], s[1]
		if isPre(want) {
			pre = false
		}
		c := compareVersions(v, strings.TrimSuffix(want, ".*"))
		switch op {
		case "==", "===":
			if strings.HasSuffix(want, ".*") {
				if !strings.HasPrefix(v+".", strings.TrimSuffix(want, "*")) {
					return false
				}
			} else if c != 0 {
				return false
			}
		case "!=":
			if c == 0 {
				return false
			}
		case "<=":
			if c > 0 {
				return false
			}
		case ">=":
			if c < 0 {
				return false
			}
		case "<":
			if c >= 0 {
				return false
			}
		case ">":
			if c <= 0 {
				return false
			}
		case "~=":
			// ~=1.4.2 means >=1.4.2, ==1.4.*
			rel := releaseOf(want)
			if c < 0 || len(rel) < 2 || compareInts(releaseOf(v)[:min(len(releaseOf(v)), len(rel)-1)], rel[:len(rel)-1]) != 0 {
				return false
			}
		}
	}
	return !pre
}

var preTag = regexp.MustCompile(`(?i)(a|b|c|rc|alpha|beta|pre|preview|dev)\d*`)

func isPre(v string) bool { return preTag.MatchString(v) }

func releaseOf(v string) []int {
	v = strings.TrimPrefix(strings.ToLower(v), "v")
	if i := strings.Index(v, "!"); i >= 0 {
		v = v[i+1:]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		j := 0
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == 0 {
			break
		}
		n, _ := strconv.Atoi(p[:j])
		out = append(out, n)
		if j < len(p) {
			break
		}
	}
	return out
}

func compareInts(a, b []int) int {
	for i := range max(len(a), len(b)) {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// compareVersions orders PEP 440 versions by their release numbers, a pre-release
// before its release; local and post parts only break ties as text.
func compareVersions(a, b string) int {
	if c := compareInts(releaseOf(a), releaseOf(b)); c != 0 {
		return c
	}
	if pa, pb := isPre(a), isPre(b); pa != pb {
		if pa {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// markerEnv is how a Pyodide session answers PEP 508 environment markers.
func (f *packageFetcher) markerEnv() map[string]string {
	full := f.python
	if full == "" {
		full = "3.14.0"
	}
	short := full
	if r := releaseOf(full); len(r) >= 2 {
		short = fmt.Sprintf("%d.%d", r[0], r[1])
	}
	return map[string]string{
		"python_version": short, "python_full_version": full, "implementation_version": full,
		"sys_platform": "emscripten", "platform_system": "Emscripten", "os_name": "posix",
		"platform_machine": "wasm32", "implementation_name": "cpython",
		"platform_python_implementation": "CPython", "platform_release": "", "platform_version": "",
		"extra": "",
	}
}

var markerToken = regexp.MustCompile(`\s*(\(|\)|'[^']*'|"[^"]*"|===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b|and\b|or\b|[A-Za-z_][A-Za-z0-9_.]*)`)

// evalMarker evaluates a PEP 508 marker (and, or, parentheses, comparisons of
// variables and quoted strings); anything else is an error and the dependency is skipped.
func evalMarker(m string, env map[string]string) (bool, error) {
	var toks []string
	rest := m
	for strings.TrimSpace(rest) != "" {
		loc := markerToken.FindStringSubmatchIndex(rest)
		if loc == nil || loc[0] != 0 {
			return false, fmt.Errorf("marker %q", m)
		}
		toks = append(toks, strings.Join(strings.Fields(rest[loc[2]:loc[3]]), " "))
		rest = rest[loc[1]:]
	}
	i := 0
	var expr func() (bool, error)
	value := func() (string, bool, error) {
		if i >= len(toks) {
			return "", false, errors.New("marker ends early")
		}
		t := toks[i]
		i++
		if len(t) >= 2 && (t[0] == '\'' || t[0] == '"') {
			return t[1 : len(t)-1], false, nil
		}
		v, ok := env[t]
		if !ok {
			return "", false, fmt.Errorf("marker variable %q", t)
		}
		return v, t == "python_version" || t == "python_full_version" || t == "implementation_version", nil
	}
	atom := func() (bool, error) {
		if i < len(toks) && toks[i] == "(" {
			i++
			v, err := expr()
			if err != nil || i >= len(toks) || toks[i] != ")" {
				return false, errors.New("marker parentheses")
			}
			i++
			return v, nil
		}
		l, lv, err := value()
		if err != nil {
			return false, err
		}
		if i >= len(toks) {
			return false, errors.New("marker ends early")
		}
		op := toks[i]
		i++
		r, rv, err := value()
		if err != nil {
			return false, err
		}
		if op == "in" || op == "not in" {
			return strings.Contains(r, l) == (op == "in"), nil
		}
		c := strings.Compare(l, r)
		if lv || rv {
			c = compareVersions(l, r)
		}
		switch op {
		case "==", "===":
			return c == 0, nil
		case "!=":
			return c != 0, nil
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		case ">=":
			return c >= 0, nil
		case "~=":
			return c >= 0, nil
		}
		return false, fmt.Errorf("marker operator %q", op)
	}
	and := func() (bool, error) {
		v, err := atom()
		for err == nil && i < len(toks) && toks[i] == "and" {
			i++
			var w bool
			w, err = atom()
			v = v && w
		}
		return v, err
	}
	expr = func() (bool, error) {
		v, err := and()
		for err == nil && i < len(toks) && toks[i] == "or" {
			i++
			var w bool
			w, err = and()
			v = v || w
		}
		return v, err
	}
	v, err := expr()
	if err == nil && i != len(toks) {
		err = fmt.Errorf("marker %q", m)
	}
	return v, err
}

// ---- the engine's side of a session's install request ----

// pipServer answers the install requests of one run of a session; what they fetch is
// part of the run's load.
type pipServer struct {
	e    *Engine
	lv   *live
	ctx  context.Context
	busy chan struct{}
	run  *pkgRun
}

type pipInstallMsg struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Path    string `json:"path"`
}

type pipDone struct {
	Op     string          `json:"op"` // pipDone
	Seq    int64           `json:"seq"`
	Wheels []pipInstallMsg `json:"wheels"`
	Lock   []string        `json:"lock"`
	Error  string          `json:"error,omitempty"`
}

func (e *Engine) newPipServer(ctx context.Context, lv *live, run *pkgRun) *pipServer {
	return &pipServer{e: e, lv: lv, ctx: ctx, busy: make(chan struct{}, 1), run: run}
}

func (s *pipServer) handle(seq int64, raw json.RawMessage) pipDone {
	out := pipDone{Op: "pipDone", Seq: seq, Wheels: []pipInstallMsg{}, Lock: []string{}}
	select {
	case s.busy <- struct{}{}:
		defer func() { <-s.busy }()
	default:
		out.Error = "another micropip.install is in progress in this session"
		return out
	}
	if s.e.fetch == nil || s.run == nil {
		out.Error = "installing packages is turned off in this sandbox; the packages of its Pyodide distribution can still be imported"
		if !s.e.cfg.PipOff {
			out.Error = "installing packages is unavailable: the server's package cache could not be set up"
		}
		return out
	}
	var req pipRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		out.Error = "unreadable install request"
		return out
	}
	e := s.e
	have := map[string]bool{}
	e.mu.Lock()
	for _, w := range s.lv.pip {
		have[normalize(w.Name)] = true
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, pipRequestTimeout)
	defer cancel()
	var lockNotes []string
	plan, err := e.fetch.install(ctx, s.run, req, have)
	if err == nil && len(plan.lock) > 0 {
		// Given to the run until it ends: the Worker loads them after this answer.
		lockNotes = s.run.ensure(ctx, "", plan.lock)
	}
	if err == nil && len(lockNotes) > 0 {
		err = &pipError{msg: strings.Join(lockNotes, "; ")}
	}
	if err != nil {
		var pe *pipError
		if errors.As(err, &pe) {
			out.Error = pe.msg
		} else {
			e.log.ErrorContext(ctx, "micropip install", "err", err)
			out.Error = "the install failed inside the sandbox engine"
		}
		return out
	}
	e.mu.Lock()
	s.lv.pip = append(s.lv.pip, plan.wheels...)
	e.mu.Unlock()
	for _, w := range plan.wheels {
		out.Wheels = append(out.Wheels, pipInstallMsg{Name: w.Name, Version: w.Version, Path: s.run.path(w.rel())})
	}
	out.Lock = plan.lock
	return out
}

// restorePip gives a saved session's wheels to the load r (fetched again and checked
// against their recorded sha256 when evicted).
func (e *Engine) restorePip(ctx context.Context, r *pkgRun, wheels []pipWheel) ([]pipInstallMsg, []string) {
	var out []pipInstallMsg
	var notes []string
	for _, w := range wheels {
		if err := e.fetch.fetchWheel(ctx, r, w, maxWheelBytes); err != nil {
			notes = append(notes, fmt.Sprintf("[sandbox] installed package %s could not be restored: %v", w.Name, err))
			continue
		}
		out = append(out, pipInstallMsg{Name: w.Name, Version: w.Version, Path: r.path(w.rel())})
	}
	return out, notes
}

func preloadCode(mods []string) string {
	var b strings.Builder
	for _, m := range mods {
		b.WriteString("import " + m + "\n")
	}
	return b.String()
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// CheckPreload tells whether mods can be a preload list: at most maxPreload module
// names (dotted identifiers), each imported before a run's code.
func CheckPreload(mods []string) error {
	if len(mods) > maxPreload {
		return sandchat.Errorf(sandchat.EINVALID, "Preload lists %d modules; the limit is %d.", len(mods), maxPreload)
	}
	for _, m := range mods {
		if !moduleName.MatchString(m) {
			return sandchat.Errorf(sandchat.EINVALID, "Preload entry %q is not a module name (a dotted Python identifier such as numpy or dateutil.parser).", m)
		}
	}
	return nil
}
