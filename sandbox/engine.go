package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// Engine runs Python sessions. It is safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger
	st  *store

	mu        sync.Mutex
	hosts     []*host
	available bool
	reason    string
	denoVer   string
	pyVer     string
	build     string
	baseHash  string
	base      []byte
	live      map[string]*live
	locks     map[string]*keyLock
	closed    bool
	stop      chan struct{}
	wg        sync.WaitGroup
	cacheDir  string
}

// live is a session whose interpreter is warm in some host's Worker.
type live struct {
	h        *host
	sid      string
	version  int64 // the durable version this interpreter matches
	base     string
	mode     string
	packages []string
	used     time.Time
	busy     bool
	// Files changed by runs that were not saved (a Python error): the next save carries them.
	unsaved    map[string][]byte
	unsavedDel map[string]bool
}

// New checks cfg and prepares an engine; Start brings up the Deno hosts.
func New(cfg Config, rdb redis.UniversalClient, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, sandchat.Errorf(sandchat.EINVALID, "%v", err)
	}
	if rdb == nil {
		return nil, errors.New("sandbox: a Redis client is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = Locate(cfg)
	st, err := newStore(rdb, cfg.RedisPrefix, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg: cfg, log: log, st: st, live: map[string]*live{}, locks: map[string]*keyLock{},
		stop: make(chan struct{}), reason: "the sandbox engine is starting (Deno and Pyodide boot in a few seconds)",
	}, nil
}

// Config returns the configuration in use, with located paths filled in.
func (e *Engine) Config() Config { return e.cfg }

func (e *Engine) unavailable(reason string) {
	e.mu.Lock()
	e.available, e.reason = false, reason
	e.mu.Unlock()
	e.log.Warn("python sandbox unavailable", "reason", reason)
}

// Start launches the hosts and makes sure a base snapshot exists. A missing or broken
// runtime is not an error: the engine reports itself unavailable, with how to fix it,
// and the server runs without the Python sandbox.
func (e *Engine) Start(ctx context.Context) error {
	cfg := e.cfg
	fix := "run `npm ci --prefix sandbox/runtime` (or set SANDCHAT_SANDBOX_RUNTIME_DIR / SANDCHAT_SANDBOX_DENO / SANDCHAT_SANDBOX_PYODIDE_DIR)"
	switch {
	case cfg.RuntimeDir == "" || !fileExists(filepath.Join(cfg.RuntimeDir, "host.ts")):
		e.unavailable("sandbox runtime (host.ts) not found: " + fix)
		return nil
	case cfg.DenoPath == "" || !isExecutable(cfg.DenoPath):
		e.unavailable("Deno not found: " + fix)
		return nil
	case cfg.PyodideDir == "" || !fileExists(filepath.Join(cfg.PyodideDir, "pyodide.mjs")):
		e.unavailable("Pyodide not found: " + fix)
		return nil
	}
	var err error
	if e.denoVer, err = denoVersion(ctx, cfg.DenoPath); err != nil {
		e.unavailable(fmt.Sprintf("Deno at %s does not run (%v): %s", cfg.DenoPath, err, fix))
		return nil
	}
	e.pyVer = pyodideVersion(cfg.PyodideDir)
	e.build = buildID(cfg, e.denoVer, e.pyVer)
	if e.cacheDir, err = os.MkdirTemp("", "sandchat-deno-"); err != nil {
		return err
	}
	if err := e.bringUp(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Redis down or a host failing to boot may pass: keep trying in the background
		// while the server runs without the sandbox.
		e.unavailable("sandbox failed to start (retrying): " + err.Error())
		e.wg.Add(1)
		go e.retryStart()
	}
	return nil
}

func (e *Engine) bringUp(ctx context.Context) error {
	if err := e.startHosts(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		hosts := e.hosts
		e.mu.Unlock()
		for _, h := range hosts {
			h.close()
		}
		return errors.New("engine closed")
	}
	e.available, e.reason = true, ""
	e.mu.Unlock()
	e.wg.Add(1)
	go e.watch()
	e.log.Info("python sandbox ready", "deno", e.denoVer, "pyodide", e.pyVer, "hosts", len(e.hosts), "base", e.baseHash)
	return nil
}

func (e *Engine) retryStart() {
	defer e.wg.Done()
	wait := 5 * time.Second
	for {
		select {
		case <-e.stop:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		err := e.bringUp(ctx)
		cancel()
		if err == nil {
			return
		}
		e.unavailable("sandbox failed to start (retrying): " + err.Error())
		wait = min(wait*2, time.Minute)
	}
}

func denoVersion(ctx context.Context, deno string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, deno, "--version")
	cmd.Env = []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("unexpected output %q", out)
	}
	return f[1], nil
}

func pyodideVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Version
}

// buildID names what a snapshot is only valid for: the exact Pyodide, Deno and the
// runtime code that shaped the base heap.
func buildID(cfg Config, deno, py string) string {
	h := sha256.New()
	fmt.Fprintf(h, "pyodide=%s deno=%s\n", py, deno)
	for _, f := range []string{filepath.Join(cfg.RuntimeDir, "worker.ts"), filepath.Join(cfg.PyodideDir, "pyodide.asm.wasm")} {
		if b, err := os.ReadFile(f); err == nil {
			h.Write(b)
		}
	}
	return py + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

func (e *Engine) hostConfig() map[string]any {
	cfg := e.cfg
	reads := []string{cfg.PyodideDir}
	if cfg.PackageDir != cfg.PyodideDir {
		reads = append(reads, cfg.PackageDir)
	}
	c := map[string]any{
		"pyodideURL":  (&url.URL{Scheme: "file", Path: cfg.PyodideDir + "/"}).String(),
		"pyodideDir":  cfg.PyodideDir + "/",
		"read":        reads,
		"net":         netAllow(cfg),
		"memory":      cfg.MemoryBytes,
		"maxOutput":   cfg.MaxOutput,
		"lockFileURL": nil,
	}
	lock := filepath.Join(cfg.PackageDir, "pyodide-lock.json")
	switch {
	case fileExists(lock):
		c["lockFileURL"] = lock
		c["packageBaseURL"] = cfg.PackageDir + "/"
		if cfg.PackageCDN != "" && cfg.PackageDir == cfg.PyodideDir {
			// The npm package lists every package but ships none: fetch them from the CDN.
			c["packageBaseURL"] = strings.TrimSuffix(cfg.PackageCDN, "/") + "/"
		}
	case cfg.PackageCDN != "":
		c["lockFileURL"] = strings.TrimSuffix(cfg.PackageCDN, "/") + "/pyodide-lock.json"
		c["packageBaseURL"] = strings.TrimSuffix(cfg.PackageCDN, "/") + "/"
	}
	return c
}

func urlHost(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func (e *Engine) poolPerHost(i int) int {
	n := e.cfg.WarmPool / e.cfg.Hosts
	if i < e.cfg.WarmPool%e.cfg.Hosts {
		n++
	}
	return n
}

func (e *Engine) spawn(ctx context.Context, idx int) (*host, error) {
	h, err := startHost(idx, hostOptions{cfg: e.cfg, cacheDir: e.cacheDir}, e.log)
	if err != nil {
		return nil, err
	}
	if _, err := h.call(ctx, map[string]any{"op": "config", "config": e.hostConfig()}, nil); err != nil {
		h.kill("config failed")
		return nil, fmt.Errorf("configure host: %w", err)
	}
	return h, nil
}

func (e *Engine) startHosts(ctx context.Context) error {
	hosts := make([]*host, e.cfg.Hosts)
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() { hosts[i], errs[i] = e.spawn(ctx, i) })
	}
	wg.Wait()
	cleanup := func() {
		for _, h := range hosts {
			if h != nil {
				h.kill("start failed")
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		cleanup()
		return err
	}
	if err := e.ensureBase(ctx, hosts[0]); err != nil {
		cleanup()
		return err
	}
	for i, h := range hosts {
		if err := e.installBase(ctx, h, i); err != nil {
			cleanup()
			return err
		}
	}
	e.mu.Lock()
	e.hosts = hosts
	e.mu.Unlock()
	return nil
}

// ensureBase finds the build's shared base in Redis or boots one and publishes it. Any
// node can then restore any session: snapshots of separate boots differ.
func (e *Engine) ensureBase(ctx context.Context, h *host) error {
	hash, err := e.st.baseFor(ctx, e.build)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	var snap []byte
	if hash != "" {
		if snap, err = e.st.loadBase(ctx, hash); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	if snap == nil {
		f, err := h.call(ctx, map[string]any{"op": "boot"}, nil)
		if err != nil {
			return fmt.Errorf("boot pyodide: %w", err)
		}
		var r struct {
			Snapshot *blob `json:"snapshot"`
		}
		if err := json.Unmarshal(f.raw, &r); err != nil {
			return err
		}
		snap = append([]byte(nil), f.bytes(r.Snapshot)...)
		if len(snap) < 64 {
			return errors.New("boot returned no snapshot")
		}
		sum := sha256.Sum256(snap)
		mine := hex.EncodeToString(sum[:])
		if hash, err = e.st.publishBase(ctx, e.build, mine, snap); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if hash != mine {
			if snap, err = e.st.loadBase(ctx, hash); err != nil || snap == nil {
				return fmt.Errorf("load base %s published by another node: %v", hash, err)
			}
		}
	}
	e.mu.Lock()
	e.base, e.baseHash = snap, hash
	e.mu.Unlock()
	return nil
}

func (e *Engine) installBase(ctx context.Context, h *host, idx int) error {
	var o out
	ref := o.add(e.base)
	if _, err := h.call(ctx, map[string]any{"op": "base", "hash": e.baseHash, "current": true, "snapshot": ref}, &o); err != nil {
		return fmt.Errorf("load base into host: %w", err)
	}
	h.mu.Lock()
	h.bases[e.baseHash] = true
	h.mu.Unlock()
	if _, err := h.call(ctx, map[string]any{"op": "pool", "size": e.poolPerHost(idx)}, nil); err != nil {
		return err
	}
	return nil
}

// hostBase loads another base into a host, for sessions saved against an older one.
func (e *Engine) hostBase(ctx context.Context, h *host, hash string) error {
	h.mu.Lock()
	ok := h.bases[hash]
	h.mu.Unlock()
	if ok {
		return nil
	}
	snap, err := e.st.loadBase(ctx, hash)
	if err != nil {
		return err
	}
	if snap == nil {
		return fmt.Errorf("base %s is gone", hash)
	}
	var o out
	ref := o.add(snap)
	if _, err := h.call(ctx, map[string]any{"op": "base", "hash": hash, "current": false, "snapshot": ref}, &o); err != nil {
		return err
	}
	h.mu.Lock()
	h.bases[hash] = true
	h.mu.Unlock()
	return nil
}

// watch enforces each host's memory budget and replaces hosts that die; their sessions
// come back from Redis on their next run.
func (e *Engine) watch() {
	defer e.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.mu.Lock()
		hosts := slices.Clone(e.hosts)
		e.mu.Unlock()
		for i, h := range hosts {
			if !h.alive() {
				e.replaceHost(i, h)
				continue
			}
			if rss := h.rss(); rss > e.cfg.HostMemoryBytes {
				e.log.Warn("sandbox host over its memory budget, killing it", "host", i, "rss", rss, "budget", e.cfg.HostMemoryBytes)
				h.kill(fmt.Sprintf("the sandbox process exceeded its memory budget (%d MiB)", e.cfg.HostMemoryBytes>>20))
			}
		}
	}
}

func (e *Engine) replaceHost(i int, dead *host) {
	e.log.Warn("sandbox host exited, restarting it", "host", i, "reason", dead.why(), "err", dead.exitErr)
	e.mu.Lock()
	for k, lv := range e.live {
		if lv.h == dead && !lv.busy {
			delete(e.live, k)
		}
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := e.spawn(ctx, i)
	if err == nil {
		err = e.installBase(ctx, h, i)
	}
	if err != nil {
		e.log.Error("sandbox host restart failed", "host", i, "err", err)
		if h != nil {
			h.kill("restart failed")
		}
		select {
		case <-e.stop:
		case <-time.After(time.Second):
		}
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		h.close()
		return
	}
	e.hosts[i] = h
	e.mu.Unlock()
}

// Available reports whether Execute can run code, and if not, why.
func (e *Engine) Available() (bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.available, e.reason
}

// Status reports versions, hosts and sessions.
func (e *Engine) Status(ctx context.Context) Status {
	e.mu.Lock()
	s := Status{
		Available: e.available, Reason: e.reason,
		Deno:     DenoStatus{Installed: e.denoVer != "", Version: e.denoVer, Path: e.cfg.DenoPath},
		Pyodide:  PyodideStatus{Installed: e.pyVer != "", Version: e.pyVer, Path: e.cfg.PyodideDir},
		LiveSess: len(e.live), BaseHash: e.baseHash,
		Limits: StatusLimits{
			TimeoutMS: e.cfg.Timeout.Milliseconds(), MaxTimeoutMS: e.cfg.MaxTimeout.Milliseconds(),
			MemoryBytes: e.cfg.MemoryBytes, MaxOutput: e.cfg.MaxOutput, MaxCode: e.cfg.MaxCode,
			NetworkAllow: append([]string{}, e.cfg.NetworkAllow...),
		},
	}
	hosts := slices.Clone(e.hosts)
	e.mu.Unlock()
	if !s.Deno.Installed && isExecutable(e.cfg.DenoPath) {
		if v, err := denoVersion(ctx, e.cfg.DenoPath); err == nil {
			s.Deno.Installed, s.Deno.Version = true, v
		}
	}
	if !s.Pyodide.Installed && e.cfg.PyodideDir != "" {
		s.Pyodide.Version = pyodideVersion(e.cfg.PyodideDir)
		s.Pyodide.Installed = s.Pyodide.Version != ""
	}
	for _, h := range hosts {
		if !h.alive() {
			continue
		}
		s.Hosts++
		s.HostRSS = append(s.HostRSS, h.rss())
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		f, err := h.call(cctx, map[string]any{"op": "stats"}, nil)
		cancel()
		if err == nil {
			var r struct {
				Pool int `json:"pool"`
			}
			_ = json.Unmarshal(f.raw, &r)
			s.WarmPool += r.Pool
		}
	}
	return s
}

// Close stops every host. Durable state is already in Redis.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.available, e.reason = false, "the sandbox engine is shut down"
	hosts := e.hosts
	e.mu.Unlock()
	close(e.stop)
	e.wg.Wait()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(h.close)
	}
	wg.Wait()
	if e.cacheDir != "" {
		_ = os.RemoveAll(e.cacheDir)
	}
	return nil
}

// ---- runs ----

func (e *Engine) check(key string, req *Request) error {
	if ok, why := e.Available(); !ok {
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", why)
	}
	if key == "" || len(key) > 512 {
		return sandchat.Errorf(sandchat.EINVALID, "Session key must be 1 to 512 bytes.")
	}
	if len(req.Code) > e.cfg.MaxCode {
		return sandchat.Errorf(sandchat.ETOOLARGE, "Code is %d bytes; the limit is %d bytes.", len(req.Code), e.cfg.MaxCode)
	}
	if req.Timeout < 0 || req.Timeout > e.cfg.MaxTimeout {
		return sandchat.Errorf(sandchat.EINVALID, "Timeout must be between 0 and %s.", e.cfg.MaxTimeout)
	}
	var total int64
	for _, f := range req.Data {
		if f.Name == "" || strings.ContainsAny(f.Name, "/\\\x00") || f.Name == "." || f.Name == ".." {
			return sandchat.Errorf(sandchat.EINVALID, "Data file name %q is not a plain file name.", f.Name)
		}
		total += int64(len(f.Data))
	}
	if total > e.cfg.MaxDataBytes {
		return sandchat.Errorf(sandchat.ETOOLARGE, "Data files total %d bytes; the limit is %d bytes.", total, e.cfg.MaxDataBytes)
	}
	return nil
}

// lockKey serialises this node's runs of one session, so only one of them polls Redis
// for the lease at a time.
func (e *Engine) lockKey(ctx context.Context, key string) (func(), error) {
	e.mu.Lock()
	l := e.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		e.locks[key] = l
	}
	l.refs++
	e.mu.Unlock()
	done := func() {
		e.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(e.locks, key)
		}
		e.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// keyLock queues one node's runs of a session; it lives only while someone holds or
// waits for it.
type keyLock struct {
	ch   chan struct{}
	refs int
}

// withLease runs fn holding the session's lease: queued behind other runs of the same
// session on any node, refused when that queue is full.
func (e *Engine) withLease(ctx context.Context, key string, fn func(token string, lost func() bool) error) error {
	token := newToken()
	ok, err := e.st.admit(ctx, key, token, e.cfg.QueueDepth, e.cfg.MaxTimeout+e.cfg.Grace+time.Minute)
	if err != nil {
		return e.redisErr(ctx, err)
	}
	defer func() { _ = e.st.leave(context.WithoutCancel(ctx), key, token) }()
	if !ok {
		return &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 2,
			Message: fmt.Sprintf("This session already has %d runs waiting; try again shortly.", e.cfg.QueueDepth)}
	}
	unlock, err := e.lockKey(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	if err := e.st.acquire(ctx, key, token); err != nil {
		return e.redisErr(ctx, err)
	}
	defer func() { _ = e.st.release(context.WithoutCancel(ctx), key, token) }()

	var mu sync.Mutex
	lostLease := false
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(leaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ok, err := e.st.renew(context.Background(), key, token)
				if err == nil && !ok {
					mu.Lock()
					lostLease = true
					mu.Unlock()
				}
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	return fn(token, func() bool { mu.Lock(); defer mu.Unlock(); return lostLease })
}

func (e *Engine) redisErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("sandbox state store: %w", err)
}

// Execute runs req.Code in the session named by key (chosen by the caller, e.g.
// "conv:42" or "conv:42/agent:7"). Runs of one session are serialised across nodes.
// Cancelling ctx interrupts the running code; the interrupted Result comes back along
// with ctx's error.
func (e *Engine) Execute(ctx context.Context, key string, req Request) (Result, error) {
	if err := e.check(key, &req); err != nil {
		return Result{}, err
	}
	if req.Timeout == 0 {
		req.Timeout = e.cfg.Timeout
	}
	var res Result
	t0 := time.Now()
	var waited time.Duration
	err := e.withLease(ctx, key, func(token string, lost func() bool) error {
		waited = time.Since(t0)
		var err error
		res, err = e.runLocked(ctx, key, token, req, true)
		return err
	})
	if res.Status != "" {
		// JSON callers get [] rather than null.
		if res.Artifacts == nil {
			res.Artifacts = []Artifact{}
		}
		if res.Session.Packages == nil {
			res.Session.Packages = []string{}
		}
	}
	e.log.Debug("sandbox run", "session", key, "status", res.Status, "from", res.Session.RestoredFrom,
		"queued_ms", waited.Milliseconds(), "exec_ms", res.ExecutionMS, "total_ms", time.Since(t0).Milliseconds(), "state_bytes", res.Session.StateBytes)
	return res, err
}

// attach makes sure key has a current interpreter, restoring it when the warm copy is
// missing or stale. Called with the lease held.
func (e *Engine) attach(ctx context.Context, key string) (*live, SessionInfo, []string, error) {
	var info SessionInfo
	var notes []string
	stored, err := e.st.version(ctx, key)
	if err != nil {
		return nil, info, nil, e.redisErr(ctx, err)
	}
	e.mu.Lock()
	lv := e.live[key]
	if lv != nil && lv.h.alive() && lv.version == stored {
		lv.busy, lv.used = true, time.Now()
		e.mu.Unlock()
		info.RestoredFrom = FromLive
		return lv, info, nil, nil
	}
	if lv != nil {
		delete(e.live, key)
	}
	e.mu.Unlock()
	if lv != nil {
		e.closeLive(lv)
	}
	var st *state
	if stored > 0 {
		if st, err = e.st.load(ctx, key, false); err != nil {
			return nil, info, nil, e.redisErr(ctx, err)
		}
	}
	h, err := e.pickHost(ctx)
	if err != nil {
		return nil, info, nil, err
	}
	nl := &live{h: h, sid: "s-" + newToken(), base: e.baseHash, mode: modeSnapshot,
		unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
	open := map[string]any{"op": "open", "sid": nl.sid, "base": e.baseHash}
	var o out
	switch {
	case st == nil:
		info.RestoredFrom = FromFresh
		seen, _ := e.st.seen(ctx, key)
		info.Expired = seen || (lv != nil && lv.version > 0)
		open["reseed"] = true
		if e.cfg.ForceReplay {
			nl.mode = modeReplay
		}
	default:
		nl.version, nl.packages = st.Version, st.Packages
		files := make([]map[string]any, 0, len(st.Files))
		for p, d := range st.Files {
			files = append(files, map[string]any{"path": p, "data": o.add(d)})
		}
		open["files"], open["packages"] = files, st.Packages
		// A heap is only meaningful to the exact build that saved it; after an upgrade
		// the session comes back by replay.
		useSnapshot := st.Mode == modeSnapshot && !e.cfg.ForceReplay && len(st.Delta) > 0 && st.Build == e.build
		if useSnapshot && st.Base != e.baseHash {
			if err := e.hostBase(ctx, h, st.Base); err != nil {
				// The session's base is gone: replay is the only way back.
				e.log.Warn("session base unavailable, replaying cells", "err", err)
				useSnapshot = false
			}
		}
		if useSnapshot {
			info.RestoredFrom = FromSnapshot
			nl.base = st.Base
			open["base"], open["header"], open["delta"] = st.Base, o.add(st.Header), o.add(st.Delta)
		} else {
			info.RestoredFrom = FromReplay
			nl.mode = modeReplay
			cells, err := e.st.rdb.LRange(ctx, e.st.key(key, "cells"), 0, -1).Result()
			if err != nil {
				return nil, info, nil, e.redisErr(ctx, err)
			}
			open["cells"], open["reseed"] = cells, true
		}
	}
	h.mu.Lock()
	h.live++
	h.mu.Unlock()
	f, err := h.call(context.WithoutCancel(ctx), open, &o)
	if err != nil {
		h.mu.Lock()
		h.live--
		h.mu.Unlock()
		if errors.Is(err, errHostGone) {
			return nil, info, nil, sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox process restarted; try again.")
		}
		return nil, info, nil, fmt.Errorf("open session: %w", err)
	}
	var r struct {
		Error   *string            `json:"error"`
		From    string             `json:"from"`
		MS      float64            `json:"ms"`
		Timings map[string]float64 `json:"timings"`
	}
	_ = json.Unmarshal(f.raw, &r)
	e.log.Debug("session opened", "session", key, "restored_from", info.RestoredFrom, "worker", r.From, "ms", r.MS, "timings", r.Timings)
	if r.Error != nil {
		notes = append(notes, "[sandbox] the session could not be fully restored: "+*r.Error)
	}
	nl.busy, nl.used = true, time.Now()
	e.mu.Lock()
	e.live[key] = nl
	e.mu.Unlock()
	e.evict()
	return nl, info, notes, nil
}

// pickHost places a session on the least loaded live host, waiting a little for a host
// that is being replaced after a crash.
func (e *Engine) pickHost(ctx context.Context) (*host, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := e.leastLoaded()
		if err == nil || time.Now().After(deadline) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *Engine) leastLoaded() (*host, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var best *host
	bestN := 0
	for _, h := range e.hosts {
		if !h.alive() {
			continue
		}
		h.mu.Lock()
		n := h.live
		h.mu.Unlock()
		if best == nil || n < bestN {
			best, bestN = h, n
		}
	}
	if best == nil {
		return nil, sandchat.Errorf(sandchat.EUNAVAILABLE, "No Python sandbox process is running; try again shortly.")
	}
	return best, nil
}

func (e *Engine) closeLive(lv *live) {
	lv.h.mu.Lock()
	lv.h.live--
	lv.h.mu.Unlock()
	if lv.h.alive() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = lv.h.call(ctx, map[string]any{"op": "close", "sid": lv.sid}, nil)
		cancel()
	}
}

// evict keeps at most MaxLive warm sessions: the least recently used idle ones go, their
// state being safe in Redis.
func (e *Engine) evict() {
	e.mu.Lock()
	var victims []*live
	for len(e.live) > e.cfg.MaxLive {
		var oldKey string
		var old *live
		for k, lv := range e.live {
			if !lv.busy && (old == nil || lv.used.Before(old.used)) {
				oldKey, old = k, lv
			}
		}
		if old == nil {
			break
		}
		delete(e.live, oldKey)
		victims = append(victims, old)
	}
	e.mu.Unlock()
	// Off the request path: terminating a Worker is the host's business, not the run's.
	for _, lv := range victims {
		go e.closeLive(lv)
	}
}

type runReply struct {
	Status          string     `json:"status"`
	Result          *string    `json:"result"`
	Error           *ExecError `json:"error"`
	Stdout          string     `json:"stdout"`
	Stderr          string     `json:"stderr"`
	StdoutTruncated bool       `json:"stdoutTruncated"`
	StderrTruncated bool       `json:"stderrTruncated"`
	Changed         []struct {
		Path string `json:"path"`
		Data *blob  `json:"data"`
	} `json:"changed"`
	Deleted       []string `json:"deleted"`
	Packages      []string `json:"packages"`
	Header        *blob    `json:"header"`
	Delta         *blob    `json:"delta"`
	SnapshotError *string  `json:"snapshotError"`
}

func (e *Engine) runLocked(ctx context.Context, key, token string, req Request, persist bool) (Result, error) {
	lv, info, notes, err := e.attach(ctx, key)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		e.mu.Lock()
		lv.busy = false
		e.mu.Unlock()
	}()
	h := lv.h
	var o out
	data := make([]map[string]any, 0, len(req.Data))
	for _, f := range req.Data {
		data = append(data, map[string]any{"name": f.Name, "data": o.add(f.Data)})
	}
	msg := map[string]any{"op": "run", "sid": lv.sid, "code": req.Code, "filename": fmt.Sprintf("<cell-%d>", lv.version+1),
		"persist": persist, "replay": lv.mode == modeReplay, "data": data}
	if req.OnOutput != nil {
		h.mu.Lock()
		h.outputs[lv.sid] = req.OnOutput
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			delete(h.outputs, lv.sid)
			h.mu.Unlock()
		}()
	}

	type reply struct {
		f   frame
		err error
	}
	done := make(chan reply, 1)
	start := time.Now()
	go func() {
		f, err := h.call(context.Background(), msg, &o)
		done <- reply{f, err}
	}()
	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	var rep reply
	var ctxErr error
	interrupted := false
	select {
	case rep = <-done:
	case <-timer.C:
		interrupted = true
	case <-ctx.Done():
		interrupted, ctxErr = true, ctx.Err()
	}
	if interrupted {
		_ = h.send(map[string]any{"op": "interrupt", "sid": lv.sid}, nil)
		select {
		case rep = <-done:
		case <-time.After(e.cfg.Grace):
			// The code ignored KeyboardInterrupt: stop its Worker. The session goes back
			// to its last durable state on the next run.
			e.dropLive(key, lv)
			<-done
			res := Result{Status: StatusTimeout, ExecutionMS: time.Since(start).Milliseconds(),
				Error: &ExecError{Type: "TimeoutError", Message: fmt.Sprintf(
					"Execution did not stop within %s of the interrupt and was terminated; the session was restored to its last saved state (version %d). Variables defined since then are lost.",
					e.cfg.Grace, lv.version)},
				Session: SessionInfo{Version: lv.version, RestoredFrom: info.RestoredFrom, Packages: lv.packages, Expired: info.Expired, Mode: lv.mode}}
			return res, ctxErr
		}
	}
	ms := time.Since(start).Milliseconds()
	if rep.err != nil {
		e.dropLive(key, lv)
		if errors.Is(rep.err, errHostGone) || !h.alive() {
			return Result{Status: StatusError, ExecutionMS: ms,
				Error: &ExecError{Type: "SandboxError", Message: fmt.Sprintf(
					"The sandbox process stopped during the run (%s); the session was restored to its last saved state (version %d).", h.why(), lv.version)},
				Session: SessionInfo{Version: lv.version, RestoredFrom: info.RestoredFrom, Packages: lv.packages, Mode: lv.mode}}, ctxErr
		}
		var he *hostError
		if errors.As(rep.err, &he) {
			return Result{Status: StatusError, ExecutionMS: ms,
				Error:   &ExecError{Type: "SandboxError", Message: "The session's interpreter failed and was restarted from its last saved state: " + he.msg},
				Session: SessionInfo{Version: lv.version, RestoredFrom: info.RestoredFrom, Packages: lv.packages, Mode: lv.mode}}, ctxErr
		}
		return Result{}, rep.err
	}
	var r runReply
	if err := json.Unmarshal(rep.f.raw, &r); err != nil {
		e.dropLive(key, lv)
		return Result{}, fmt.Errorf("sandbox reply: %w", err)
	}
	res := Result{Status: r.Status, Stdout: r.Stdout, Stderr: r.Stderr, Result: r.Result, Error: r.Error, ExecutionMS: ms, Artifacts: []Artifact{}}
	if r.StdoutTruncated {
		res.Stdout += fmt.Sprintf("\n[... output truncated at %d bytes ...]\n", e.cfg.MaxOutput)
	}
	if r.StderrTruncated {
		res.Stderr += fmt.Sprintf("\n[... output truncated at %d bytes ...]\n", e.cfg.MaxOutput)
	}
	if len(notes) > 0 {
		res.Stderr = strings.Join(notes, "\n") + "\n" + res.Stderr
	}
	if interrupted && res.Status == StatusTimeout && res.Error != nil {
		if ctxErr != nil {
			res.Error.Message = "Execution was cancelled."
		} else {
			res.Error.Message = fmt.Sprintf("Execution exceeded the %s time limit and was interrupted; the session keeps its state.", req.Timeout)
		}
	}
	changed := map[string][]byte{}
	var skipped []string
	for _, c := range r.Changed {
		b := rep.f.bytes(c.Data)
		changed[c.Path] = b
		switch {
		case len(res.Artifacts) >= e.cfg.MaxArtifacts:
			skipped = append(skipped, c.Path+" (too many files)")
		case int64(len(b)) > e.cfg.MaxArtifactBytes:
			skipped = append(skipped, c.Path+" (too large)")
		default:
			res.Artifacts = append(res.Artifacts, Artifact{Name: c.Path, ContentType: contentType(c.Path, b), Data: b, Size: int64(len(b))})
		}
	}
	sort.Slice(res.Artifacts, func(i, j int) bool { return res.Artifacts[i].Name < res.Artifacts[j].Name })
	if len(skipped) > 0 {
		sort.Strings(skipped)
		res.Stderr += "[sandbox] files not returned: " + strings.Join(skipped, ", ") + "\n"
	}
	var unsaved []string
	for p, b := range changed {
		if int64(len(b)) > e.cfg.MaxArtifactBytes || (len(lv.unsaved) >= maxSavedFilesPerRun && lv.unsaved[p] == nil) {
			// Redis is no place for big files: they live on in the warm session only.
			unsaved = append(unsaved, p)
			continue
		}
		lv.unsaved[p] = b
		delete(lv.unsavedDel, p)
	}
	if len(unsaved) > 0 {
		sort.Strings(unsaved)
		res.Stderr += fmt.Sprintf("[sandbox] not kept with the session state (over %d MiB, or too many files): %s\n",
			e.cfg.MaxArtifactBytes>>20, strings.Join(unsaved, ", "))
	}
	for _, p := range r.Deleted {
		delete(lv.unsaved, p)
		lv.unsavedDel[p] = true
	}
	lv.packages = r.Packages
	res.Session = SessionInfo{Version: lv.version, RestoredFrom: info.RestoredFrom, Packages: r.Packages, Expired: info.Expired, Mode: lv.mode, Live: true}
	if res.Status != StatusSuccess || !persist {
		// A failed run never replaces the last good state; the warm interpreter keeps
		// whatever the run left, like a notebook after an exception.
		return res, ctxErr
	}
	mode := lv.mode
	var header, delta []byte
	if mode == modeSnapshot {
		header, delta = rep.f.bytes(r.Header), rep.f.bytes(r.Delta)
		if header == nil || delta == nil {
			mode = modeReplay
			if r.SnapshotError != nil {
				e.log.Warn("session switches to replay persistence", "session", key, "reason", *r.SnapshotError)
			}
		}
	}
	deleted := make([]string, 0, len(lv.unsavedDel))
	for p := range lv.unsavedDel {
		deleted = append(deleted, p)
	}
	v, stateBytes, err := e.st.save(context.WithoutCancel(ctx), key, saveReq{
		Token: token, From: lv.version, Fresh: lv.version == 0,
		Base: lv.base, Build: e.build, Mode: mode, Header: header, Delta: delta, Packages: r.Packages,
		Changed: lv.unsaved, Deleted: deleted, Cell: req.Code,
	})
	if err != nil {
		// The warm interpreter is now ahead of Redis: drop it, so the next run starts
		// from the last state that was saved.
		e.dropLive(key, lv)
		e.log.ErrorContext(ctx, "save sandbox session", "session", key, "err", err)
		return res, sandchat.Errorf(sandchat.EUNAVAILABLE, "The code ran but its session state could not be saved; the next run starts from version %d.", lv.version)
	}
	lv.version, lv.mode = v, mode
	lv.unsaved, lv.unsavedDel = map[string][]byte{}, map[string]bool{}
	res.Session.Version, res.Session.Mode, res.Session.StateBytes = v, mode, int64(stateBytes)
	return res, ctxErr
}

// maxSavedFilesPerRun bounds how many working-directory files one save may write.
const maxSavedFilesPerRun = 1000

func (e *Engine) dropLive(key string, lv *live) {
	e.mu.Lock()
	if e.live[key] == lv {
		delete(e.live, key)
	}
	e.mu.Unlock()
	e.closeLive(lv)
}

func contentType(name string, b []byte) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		sniff := http.DetectContentType(b)
		// Trust the bytes over the name when they clearly say image or archive.
		if strings.HasPrefix(sniff, "image/") || sniff == "application/pdf" || sniff == "application/zip" {
			return sniff
		}
		return t
	}
	return http.DetectContentType(b)
}

// Session describes the durable state of key; ENOTFOUND when there is none.
func (e *Engine) Session(ctx context.Context, key string) (SessionInfo, error) {
	st, err := e.st.load(ctx, key, false)
	if err != nil {
		return SessionInfo{}, e.redisErr(ctx, err)
	}
	if st == nil {
		return SessionInfo{}, sandchat.Errorf(sandchat.ENOTFOUND, "This conversation has no Python session.")
	}
	info := SessionInfo{Version: st.Version, Packages: st.Packages, Mode: st.Mode, UpdatedAt: st.Updated, Files: []string{}}
	if info.Packages == nil {
		info.Packages = []string{}
	}
	for p := range st.Files {
		info.Files = append(info.Files, p)
	}
	sort.Strings(info.Files)
	info.StateBytes = int64(len(st.Header))
	if n, err := e.st.rdb.HStrLen(ctx, e.st.key(key, "state"), "delta").Result(); err == nil {
		info.StateBytes += n
	}
	e.mu.Lock()
	if lv := e.live[key]; lv != nil && lv.version == st.Version {
		info.Live = true
	}
	e.mu.Unlock()
	return info, nil
}

// Reset forgets key's state; the next run starts a fresh interpreter. It waits for a
// run in progress to finish.
func (e *Engine) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sandchat.Errorf(sandchat.EINVALID, "Session key is required.")
	}
	return e.withLease(ctx, key, func(string, func() bool) error {
		if err := e.st.reset(ctx, key); err != nil {
			return e.redisErr(ctx, err)
		}
		e.mu.Lock()
		lv := e.live[key]
		delete(e.live, key)
		e.mu.Unlock()
		if lv != nil {
			e.closeLive(lv)
		}
		return nil
	})
}
