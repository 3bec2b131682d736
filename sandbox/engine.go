package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// Engine runs Python sessions, each in a session process of its own, confined by the
// kernel: the process side (the process and its protocol, bubblewrap, cgroups, the
// compiled-code cache) is internal/proc. It is safe for concurrent use.
// The package comment (doc.go) maps the files.
type Engine struct {
	cfg Config
	log *slog.Logger
	st  Store

	// Set once by Start before the engine reports itself available; read-only after.
	cacheDir string
	rt       runtimeInfo
	fetch    *pkgs.Fetcher // nil unless packages come from a CDN or micropip is on

	procs   *nodeProcs // starting processes within the node's bound (procs.go)
	pool    *pool
	adm     *admission
	history History      // nil: a session the store lost starts fresh
	obs     Observer     // what the engine does, for metrics (observe.go); never nil
	tracer  trace.Tracer // spans of a run's steps and of checkpoints (WithTracer); never nil
	leases  *leases      // a session's runs, one at a time across nodes (lease.go)

	sess *sessions    // the live sessions of this node (sessions.go)
	res  *residency   // which sessions keep a process here, and evictions (residency.go)
	env  *session.Env // what each session is handed (internal/session); Start completes it

	state *availability // whether runs are taken, and why not

	mu sync.Mutex // guards rt and procs.launch while Start sets them

	stop chan struct{}
	// ctx ends with Close: work in the background (pool refills) stops with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// runtimeInfo is what Start learns about the runtime.
type runtimeInfo struct {
	deno, pyodide, build string
	isolation            string
}

// New checks cfg and prepares an engine that keeps its sessions in st (see
// sandbox/redisstore); Start brings up the session processes.
func New(cfg Config, st Store, log *slog.Logger, opts ...Option) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, sandchat.Errorf(sandchat.EINVALID, "%v", err)
	}
	if st == nil {
		return nil, errors.New("sandbox: a state store is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = Locate(cfg)
	e := &Engine{
		cfg: cfg, log: log, st: st, sess: newSessions(), stop: make(chan struct{}), obs: noObserver{}, tracer: noop.Tracer{},
		state: &availability{log: log, reason: "the sandbox engine is starting (Deno and Pyodide boot in a few seconds)"},
	}
	// Options first: the helpers built below take what they set (the observer, the
	// history). Then each helper is built on those it uses, and nothing reaches back.
	for _, o := range opts {
		o(e)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.adm = newAdmission(cfg)
	e.leases = &leases{st: st, cfg: &e.cfg, log: e.log}
	e.procs = &nodeProcs{cfg: &e.cfg, log: log, adm: e.adm, st: st, obs: e.obs, tracer: e.tracer}
	e.pool = newPool(e.procs, e.ctx, &e.wg, e.state.isClosed)
	e.res = &residency{cfg: &e.cfg, sess: e.sess, pool: e.pool, adm: e.adm, procs: e.procs}
	e.env = &session.Env{Limits: cfg.limits(), Procs: processes{e.procs, e.pool}, Store: st, History: e.history,
		Obs: e.obs, Tracer: e.tracer, Adopt: e.res.adopt, Lease: e.leases.with, Log: log}
	return e, nil
}

// Config returns the configuration in use, with located paths filled in.
func (e *Engine) Config() Config { return e.cfg }

// availability is whether the engine takes runs, and if not, why; closed once it is
// shut down, for good.
type availability struct {
	log       *slog.Logger
	mu        sync.Mutex // guards available, reason and closed
	available bool
	reason    string
	closed    bool
}

// down takes the engine out of service for reason; a shut-down engine keeps its own.
func (a *availability) down(reason string) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.available, a.reason = false, reason
	a.mu.Unlock()
	a.log.Warn("python sandbox unavailable", "reason", reason)
}

// up makes the engine available, unless it was shut down meanwhile.
func (a *availability) up() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("engine closed")
	}
	a.available, a.reason = true, ""
	return nil
}

func (a *availability) get() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.available, a.reason
}

// shut marks the engine shut down; false when it already was.
func (a *availability) shut() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.closed = true
	a.available, a.reason = false, "the sandbox engine is shut down"
	return true
}

func (a *availability) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Start checks the runtime and the isolation, makes sure a base snapshot exists and
// fills the warm pool. A missing runtime or isolation is not an error: the engine
// reports itself unavailable, with how to fix it, and the server runs without the
// Python sandbox.
func (e *Engine) Start(ctx context.Context) error {
	cfg := e.cfg
	fix := "run `npm ci --prefix sandbox/runtime` (or set SANDCHAT_SANDBOX_RUNTIME_DIR / SANDCHAT_SANDBOX_DENO / SANDCHAT_SANDBOX_PYODIDE_DIR)"
	switch {
	case cfg.RuntimeDir == "" || !fileExists(filepath.Join(cfg.RuntimeDir, "host.ts")):
		e.state.down("sandbox runtime (host.ts) not found: " + fix)
		return nil
	case cfg.DenoPath == "" || !isExecutable(cfg.DenoPath):
		e.state.down("Deno not found: " + fix)
		return nil
	case cfg.PyodideDir == "" || !fileExists(filepath.Join(cfg.PyodideDir, "pyodide.mjs")):
		e.state.down("Pyodide not found: " + fix)
		return nil
	}
	deno, err := denoVersion(ctx, cfg.DenoPath)
	if err != nil {
		e.state.down(fmt.Sprintf("Deno at %s does not run (%v): %s", cfg.DenoPath, err, fix))
		return nil
	}
	rt := runtimeInfo{deno: deno, pyodide: pyodideVersion(cfg.PyodideDir)}
	rt.build = buildID(cfg, rt.deno, rt.pyodide)
	if cfg.PackageCacheDir != "" && (cfg.PackageCDN != "" || !cfg.PipOff) {
		if e.fetch, err = pkgs.New(cfg.Settings, e.log); err != nil {
			if cfg.PackageCDN != "" {
				e.state.down("the package source cannot be set up: " + err.Error())
				return nil
			}
			// Only micropip needed the cache: Python runs without it rather than not at all.
			e.log.Warn("micropip is unavailable: the package cache cannot be set up", "dir", cfg.PackageCacheDir, "err", err)
			e.fetch, cfg.PackageCacheDir, e.cfg.PackageCacheDir = nil, "", ""
		}
	}
	if e.cacheDir, err = os.MkdirTemp("", "sandchat-sandbox-"); err != nil {
		return err
	}
	_ = os.Chmod(e.cacheDir, 0o755)
	e.procs.bases.dir = filepath.Join(e.cacheDir, "bases")
	if err := os.Mkdir(e.procs.bases.dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("sandchat-%d-%s", os.Getpid(), newToken()[:8])
	j, err := proc.OpenJail(cfg.jailSpec(e.procs.bases.dir), name)
	if err != nil {
		e.state.down("the Python sandbox cannot isolate sessions: " + err.Error())
		return nil
	}
	rt.isolation = j.Describe()
	e.mu.Lock()
	e.procs.launch = &proc.Launcher{Jail: j, Log: e.log, TmpDir: e.cacheDir, Fetch: e.fetch, CacheDir: cfg.PackageCacheDir, MaxFrame: maxReplyBytes(cfg)}
	e.procs.config = runtimeConfig(cfg, e.fetch)
	e.rt, e.env.Build = rt, rt.build
	if e.fetch != nil {
		e.env.Packages = e.fetch
	}
	e.mu.Unlock()
	if err := e.bringUp(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Redis down or a process failing to boot may pass: keep trying in the background
		// while the server runs without the sandbox.
		e.state.down("sandbox failed to start (retrying): " + err.Error())
		e.wg.Go(func() {
			select {
			case <-e.stop:
				return
			case <-time.After(5 * time.Second):
			}
			retry := sandchat.Backoff{Initial: 10 * time.Second, Max: time.Minute, For: 100 * 365 * 24 * time.Hour}
			_ = retry.Retry(e.ctx, func() error {
				ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
				defer cancel()
				err := e.bringUp(ctx)
				if err != nil && e.ctx.Err() == nil {
					e.state.down("sandbox failed to start (retrying): " + err.Error())
				}
				return err
			}, func(error) bool { return true })
		})
	}
	return nil
}

// bringUp makes sure a base snapshot exists, fills the compiled-code cache, and then
// takes runs: the pool fills and idle sessions are watched.
func (e *Engine) bringUp(ctx context.Context) error {
	if err := e.procs.ensureBase(ctx, e.rt.build); err != nil {
		return err
	}
	e.procs.fillCode(ctx)
	if err := e.state.up(); err != nil {
		return err
	}
	e.pool.start()
	e.wg.Go(func() { e.res.watch(e.stop) })
	e.log.Info("python sandbox ready", "deno", e.rt.deno, "pyodide", e.rt.pyodide, "base", e.procs.Base(), "isolation", e.rt.isolation)
	return nil
}

func ptr[T any](v T) *T { return &v }

// runtimeConfig is what every session process is primed with; fetch is the engine's
// package fetcher, nil for none.
func runtimeConfig(cfg Config, fetch *pkgs.Fetcher) proc.RuntimeConfig {
	c := proc.RuntimeConfig{
		PyodideURL: (&url.URL{Scheme: "file", Path: cfg.PyodideDir + "/"}).String(),
		PyodideDir: cfg.PyodideDir + "/",
		Read:       proc.Dirs(cfg.PyodideDir, cfg.PackageDir, cfg.PackageCacheDir),
		Net:        netAllow(cfg),
		Memory:     cfg.MemoryBytes, MaxOutput: cfg.MaxOutput,
		MaxFileBytes: max(cfg.MaxArtifactBytes, 1), MaxFiles: session.MaxChangedFiles,
		MaxDisplays: cfg.MaxDisplays, MaxDisplayBytes: cfg.MaxDisplayBytes,
	}
	if c.Net == nil {
		c.Net = []string{}
	}
	lock := filepath.Join(cfg.PackageDir, "pyodide-lock.json")
	cdn := strings.TrimSuffix(cfg.PackageCDN, "/") + "/"
	switch {
	case fetch != nil && fetch.CDN() != "":
		// The engine fetches and verifies wheels; sessions only read its cache.
		cached := filepath.Join(fetch.Dir(), "pyodide-lock.json")
		c.LockFileURL, c.PackageBaseURL = &cached, ptr(fetch.Dir()+"/")
	case fileExists(lock):
		c.LockFileURL, c.PackageBaseURL = &lock, ptr(cfg.PackageDir+"/")
		if cfg.PackageCDN != "" && cfg.PackageDir == cfg.PyodideDir {
			// The npm package lists every package but ships none: fetch them from the CDN.
			c.PackageBaseURL = &cdn
		}
	case cfg.PackageCDN != "":
		c.LockFileURL, c.PackageBaseURL = ptr(cdn+"pyodide-lock.json"), &cdn
	}
	return c
}

// maxReplyBytes bounds one frame from a session process: a heap delta, the changed
// files it may send, and its output.
func maxReplyBytes(c Config) int {
	files := max(int64(c.MaxArtifacts)*c.MaxArtifactBytes, c.MaxStateBytes)
	return int(min(c.MemoryBytes+files+4*int64(c.MaxOutput)+64<<20, 1<<31-1))
}

func netAllow(cfg Config) []string {
	nets := append([]string(nil), cfg.NetworkAllow...)
	if cfg.PackageCDN != "" && cfg.PackageCacheDir == "" {
		// Packages load inside the session, so the CDN is reachable from user code too.
		if u, err := url.Parse(cfg.PackageCDN); err == nil && u.Host != "" {
			nets = append(nets, u.Host)
		}
	}
	return nets
}

// Available reports whether Execute can run code, and if not, why.
func (e *Engine) Available() (bool, string) { return e.state.get() }

// Status reports versions, isolation, processes and sessions.
func (e *Engine) Status(ctx context.Context) Status {
	available, reason := e.state.get()
	e.mu.Lock()
	s := Status{
		Available: available, Reason: reason,
		Limits: StatusLimits{
			TimeoutMS: e.cfg.Timeout.Milliseconds(), MaxTimeoutMS: e.cfg.MaxTimeout.Milliseconds(),
			MemoryBytes: e.cfg.MemoryBytes, MaxOutput: e.cfg.MaxOutput, MaxCode: e.cfg.MaxCode,
			NetworkAllow: append([]string{}, e.cfg.NetworkAllow...), MaxStateBytes: e.cfg.MaxStateBytes,
			IdleTimeoutMS: e.cfg.IdleTimeout.Milliseconds(), Pip: !e.cfg.PipOff && e.fetch != nil,
		},
	}
	rt, l := e.rt, e.procs.launch
	e.mu.Unlock()
	s.Deno = DenoStatus{Installed: rt.deno != "", Version: rt.deno, Path: e.cfg.DenoPath}
	s.Pyodide = PyodideStatus{Installed: rt.pyodide != "", Version: rt.pyodide, Path: e.cfg.PyodideDir}
	s.BaseHash, s.Isolation = e.procs.Base(), rt.isolation
	if l != nil {
		s.Limits.ProcessMemoryBytes = l.Jail.MemoryLimit()
	}
	if !s.Deno.Installed && isExecutable(e.cfg.DenoPath) {
		if v, err := denoVersion(ctx, e.cfg.DenoPath); err == nil {
			s.Deno.Installed, s.Deno.Version = true, v
		}
	}
	if !s.Pyodide.Installed && e.cfg.PyodideDir != "" {
		s.Pyodide.Version = pyodideVersion(e.cfg.PyodideDir)
		s.Pyodide.Installed = s.Pyodide.Version != ""
	}
	s.WarmPool, s.Spares = e.pool.sizes()
	s.LiveSess = e.sess.count()
	for _, p := range e.sess.procs() {
		s.SessionMemory = append(s.SessionMemory, p.Memory())
	}
	s.Processes = s.LiveSess + s.WarmPool + s.Spares
	_, s.Waiting, s.MaxProcesses = e.adm.procs.Stats()
	s.UserWaiting = e.adm.users.Waiting()
	return s
}

// Close stops every session process. Durable state is already in Redis.
func (e *Engine) Close() error {
	if !e.state.shut() {
		return nil
	}
	e.sess.closeAll()
	close(e.stop)
	e.cancel()
	e.wg.Wait()
	var wg sync.WaitGroup
	for _, p := range e.pool.drain() {
		wg.Go(func() { p.Close("the sandbox engine is shut down") })
	}
	wg.Wait()
	if l := e.procs.launch; l != nil {
		l.Jail.Close()
	}
	if e.cacheDir != "" {
		_ = os.RemoveAll(e.cacheDir)
	}
	return nil
}
