package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/admit"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// nodeProcs hands out this node's session processes: a ready one (the base interpreter
// loaded) or one with a saved heap restored, from the warm pool or started within the
// node's bound (admission), primed with the current base (found or booted by
// ensureBase, base.go; packed once per base) and mounting the compiled-code cache it
// fills. What a process is belongs to
// internal/proc.
type nodeProcs struct {
	cfg *Config // the engine's
	log *slog.Logger
	adm *admission

	// Set once by Start before the engine reports itself available; read-only after.
	launch *proc.Launcher
	config proc.RuntimeConfig // what every process is primed with

	bases baseFiles      // the base as processes are primed with it (basepack.go)
	code  proc.CodeCache // what Deno compiles for a process, filled once

	st  Store    // older bases, for a session saved against one
	obs Observer // told of each process started, and of each the kernel killed
	// tracer makes a span of each wait for room on the node.
	tracer trace.Tracer

	mu       sync.Mutex // guards base and baseHash, which a new base replaces
	base     []byte     // the base snapshot new sessions start from
	baseHash string
}

// currentBase is the base snapshot new sessions start from.
func (n *nodeProcs) currentBase() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.base
}

// Base names the current base.
func (n *nodeProcs) Base() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.baseHash
}

func (n *nodeProcs) setBase(b []byte, hash string) {
	n.mu.Lock()
	n.base, n.baseHash = b, hash
	n.mu.Unlock()
}

// processes are the node's session processes as sessions ask for them
// (session.Processes): from the warm pool when it has one, else started within the
// node's bounds.
type processes struct {
	*nodeProcs
	pool *pool
}

// Ready is a process with the base interpreter: from the warm pool, or started now once
// the node has room for it (wait bounds the wait for room, which waited adds to).
func (ps processes) Ready(wait, ctx context.Context, waited *time.Duration) (*proc.Process, error) {
	if p := ps.pool.takeReady(); p != nil {
		return p, nil
	}
	return ps.startReady(wait, ctx, waited)
}

// Primed is a process primed with the base snapshot named base, for a saved heap to be
// loaded in it: a spare from the pool when that is the current base, else one started
// once the node has room for it (wait bounds the wait for room, which waited adds to).
func (ps processes) Primed(wait, ctx context.Context, waited *time.Duration, base string) (*proc.Process, error) {
	if base == ps.Base() {
		if p := ps.pool.takeSpare(); p != nil {
			return p, nil
		}
	}
	return ps.startPrimed(wait, ctx, waited, base)
}

// startReady starts a process and loads the base interpreter in it, once the node has
// room for it.
func (n *nodeProcs) startReady(wait, ctx context.Context, waited *time.Duration) (*proc.Process, error) {
	// Starting is bounded on its own (a loaded machine may take seconds): RestoreTimeout
	// bounds the restore work that follows.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolStartBudget)
	defer cancel()
	return n.spawn(wait, ctx, waited, n.currentBase(), func(p *proc.Process) error {
		if _, err := p.Call(ctx, proc.LoadReq{Op: "load"}, nil); err != nil {
			return session.ProcessError(err, p)
		}
		return nil
	})
}

// startPrimed starts a process primed with the base named base (the current one, or an
// older one from the store), once the node has room for it.
func (n *nodeProcs) startPrimed(wait, ctx context.Context, waited *time.Duration, base string) (*proc.Process, error) {
	snap := n.currentBase()
	if base != n.Base() {
		b, err := n.st.LoadBase(ctx, base)
		if err != nil {
			return nil, err
		}
		if b == nil {
			return nil, &proc.Error{Msg: "the base snapshot of this session is gone"}
		}
		snap = b
	}
	start, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolStartBudget)
	defer cancel()
	return n.spawn(wait, start, waited, snap, nil)
}

// admitProc waits for room for one more session process. wait bounds the wait (with
// AdmitTimeout): the caller giving up leaves the queue.
func (n *nodeProcs) admitProc(wait context.Context) (*slot, error) {
	ctx, cancel := context.WithTimeout(wait, n.cfg.AdmitTimeout)
	defer cancel()
	err := n.adm.procs.Acquire(ctx)
	switch {
	case err == nil:
		return &slot{g: n.adm.procs}, nil
	case wait.Err() != nil:
		return nil, wait.Err()
	case errors.Is(err, admit.ErrQueueFull):
		return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
			"The Python sandbox of this server is at capacity (%d session processes, %d runs waiting); try again in a few seconds.",
			n.adm.maxProcs, n.cfg.AdmitQueue)}
	}
	return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
		"The Python sandbox of this server is at capacity (%d session processes): no room freed within %s; try again in a few seconds.",
		n.adm.maxProcs, n.cfg.AdmitTimeout)}
}

// errNoRoom is what a pool refill meets when the node has no slot to spare: it waits.
var errNoRoom = errors.New("no room for another session process")

// spawn starts a session process within the node's bounds: it waits for room (as long
// as wait and AdmitTimeout allow; waited, when not nil, adds how long), then for a turn
// to start one, and runs prep (loading a heap: the rest of the CPU-bound start) in that
// turn. ctx bounds the start itself.
func (n *nodeProcs) spawn(wait, ctx context.Context, waited *time.Duration, base []byte, prep func(*proc.Process) error) (*proc.Process, error) {
	t0 := time.Now()
	_, span := n.tracer.Start(wait, "sandbox admission")
	s, err := n.admitProc(wait)
	if waited != nil {
		*waited += time.Since(t0)
	}
	if err != nil {
		span.SetStatus(codes.Error, sandchat.ErrorMessage(err))
		span.End()
		return nil, err
	}
	span.End()
	if err := n.adm.starts.Acquire(ctx); err != nil {
		s.release()
		return nil, session.ProcessError(err, nil)
	}
	defer n.adm.starts.Release()
	p, err := n.startProc(ctx, base, false, s)
	if err != nil {
		return nil, session.ProcessError(err, nil)
	}
	if prep != nil {
		if err := prep(p); err != nil {
			p.Close("start failed")
			return nil, err
		}
	}
	return p, nil
}

// trySpawn is spawn for work that can wait (the pool): it takes room and a start turn
// only if both are free and no run waits for them, else errNoRoom.
func (n *nodeProcs) trySpawn(ctx context.Context, base []byte, warmup bool) (*proc.Process, error) {
	return n.tryStart(ctx, base, warmup, n.code.Mount())
}

// tryStart is trySpawn with the compiled-code cache the process mounts.
func (n *nodeProcs) tryStart(ctx context.Context, base []byte, warmup bool, code proc.CodeMount) (*proc.Process, error) {
	if !n.adm.procs.TryAcquire() {
		return nil, errNoRoom
	}
	s := &slot{g: n.adm.procs}
	if !n.adm.starts.TryAcquire() {
		s.release()
		return nil, errNoRoom
	}
	defer n.adm.starts.Release()
	return n.startProcWith(ctx, base, warmup, s, code)
}

// startProc starts a session process (internal/proc) and primes it with base, packed
// into a file once per base (basepack.go); base is nil for the process that boots a new
// base. s is the process's slot under the node's bound (admission.go); it is given back
// when the process is gone. The process mounts the compiled-code cache once it is filled.
func (n *nodeProcs) startProc(ctx context.Context, base []byte, warmup bool, s *slot) (*proc.Process, error) {
	return n.startProcWith(ctx, base, warmup, s, n.code.Mount())
}

func (n *nodeProcs) startProcWith(ctx context.Context, base []byte, warmup bool, s *slot, code proc.CodeMount) (*proc.Process, error) {
	file, err := n.bases.name(base)
	if err != nil {
		s.release()
		return nil, err
	}
	p, err := n.launch.Start(ctx, proc.Start{
		BaseFile: file, Base: base, Warmup: warmup,
		Config: n.config, Code: code, Release: s.release,
	})
	if err != nil {
		return nil, err
	}
	n.obs.ProcessStarted()
	go func() {
		<-p.Done()
		if p.OOMKilled() {
			n.obs.OOMKilled()
		}
	}()
	return p, nil
}

// codeFills is how many processes fill the compiled-code cache, one after the other:
// the second still adds to what the first left (BenchmarkReadyProcess: ~600 CPU-ms a
// process with one, ~500 with two, ~630 without the cache), a third no more.
const codeFills = 2

// fillCode fills the compiled-code cache (proc.CodeCache) before the engine reports
// itself available, so that no run waits behind it: processes that run no session's
// code start and load the base interpreter as a ready process does, then stop. The
// cache is the host's, one per CodeKey, under the temporary directory: an engine that
// finds it filled (another engine of this host, an earlier start) only mounts it. A
// failure leaves processes without it (slower to start, nothing else).
func (n *nodeProcs) fillCode(ctx context.Context) {
	if !n.launch.Jail.Strict() || n.code.Ready() {
		return
	}
	if err := n.fillCodeDir(ctx); err != nil && ctx.Err() == nil {
		n.log.Warn("sandbox compiled-code cache not filled: session processes start without it", "err", err)
	}
}

// codeRoot is the directory that holds this host's compiled-code caches: this user's
// own, written by nobody else.
func codeRoot() (string, error) {
	root := filepath.Join(os.TempDir(), fmt.Sprintf("sandchat-code-%d", os.Getuid()))
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(root)
	if err != nil {
		return "", err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || !ok || int(sys.Uid) != os.Getuid() || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a directory of this server's user that only it may write", root)
	}
	return root, nil
}

func (n *nodeProcs) fillCodeDir(ctx context.Context) error {
	root, err := codeRoot()
	if err != nil {
		return err
	}
	final := filepath.Join(root, n.launch.Jail.CodeKey())
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		n.code.Filled(final)
		return nil
	}
	// A fill that a crash interrupted is left behind: gone after an hour.
	old, _ := filepath.Glob(filepath.Join(root, "filling-*"))
	for _, d := range old {
		if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > time.Hour {
			_ = os.RemoveAll(d)
		}
	}
	dir, err := os.MkdirTemp(root, "filling-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) // left only when it did not become the cache
	if uid, gid := n.launch.Jail.User(); uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
	}
	for range codeFills {
		if err := n.fillCodeOnce(ctx, dir); err != nil {
			return err
		}
	}
	if err := lockDown(dir); err != nil {
		return err
	}
	if err := os.Rename(dir, final); err != nil {
		// Another engine of this host filled it meanwhile: use that one.
		if st, serr := os.Stat(final); serr != nil || !st.IsDir() {
			return err
		}
	}
	n.code.Filled(final)
	return nil
}

// lockDown makes a filled cache the engine's: every entry owned by the server's user,
// so the sandbox user cannot change it even outside the read-only mount. A file with
// other links (Deno hard-links its own binary in there) is left as it is: it is not
// the cache's alone.
func lockDown(dir string) error {
	uid, gid := os.Getuid(), os.Getgid()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if sys, ok := info.Sys().(*syscall.Stat_t); ok && !d.IsDir() && sys.Nlink > 1 {
			return nil
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

func (n *nodeProcs) fillCodeOnce(ctx context.Context, dir string) error {
	p, err := n.tryStart(ctx, n.currentBase(), false, n.code.Filling(dir))
	if err != nil {
		return err
	}
	defer p.Close("the compiled-code cache is filled")
	_, err = p.Call(ctx, proc.LoadReq{Op: "load", Warm: true}, nil)
	return err
}
