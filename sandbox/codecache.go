package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// denoDir is where a session process finds Deno's cache (DENO_DIR) inside its sandbox.
const denoDir = "/tmp/deno"

// codeFills is how many processes fill the cache, one after the other: the second
// still adds to what the first left (BenchmarkReadyProcess: ~600 CPU-ms a process
// with one, ~500 with two, ~630 without the cache), a third no more.
const codeFills = 2

// codeCache is the node's cache of what Deno compiles for a session process: the
// runtime's TypeScript transpiled to JavaScript, and V8's code cache of it and of
// Pyodide's JavaScript. Without it every process would transpile and compile them
// again (its DENO_DIR, in a private /tmp, starts empty): about a fifth of the CPU a new
// process costs (BenchmarkReadyProcess). One process started for that alone, which runs
// no session's code and is stopped once it has loaded the base interpreter, fills it;
// every process after it mounts it read-only, so no session can change what another
// runs. Only under bubblewrap: a process-mode session has no mount of its own to make
// read-only, and keeps a fresh DENO_DIR.
type codeCache struct {
	dir   string
	ready atomic.Bool
}

// codeMount is the compiled-code cache a process mounts: none when dir is "", writable
// only for the process that fills it.
type codeMount struct {
	dir  string
	fill bool
}

// mount is the cache as every session process mounts it, once it is filled.
func (c *codeCache) mount() codeMount {
	if !c.ready.Load() {
		return codeMount{}
	}
	return codeMount{dir: c.dir}
}

// fillCode fills the compiled-code cache in the background once the engine is up:
// processes start and load the base interpreter as a ready process does, then stop.
// Processes started meanwhile go without it, and so do all if it fails (slower to
// start, nothing else).
func (e *Engine) fillCode() {
	defer e.wg.Done()
	j := e.jail
	if j.mode == IsolationProcess || e.code.ready.Load() {
		return
	}
	if err := e.fillCodeDir(e.ctx, filepath.Join(e.cacheDir, "code")); err != nil && e.ctx.Err() == nil {
		e.log.Warn("sandbox compiled-code cache not filled: session processes start without it", "err", err)
	}
}

func (e *Engine) fillCodeDir(ctx context.Context, dir string) error {
	j := e.jail
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if j.uid >= 0 {
		if err := os.Chown(dir, j.uid, j.gid); err != nil {
			return err
		}
	}
	for range codeFills {
		if err := e.fillCodeOnce(ctx, dir); err != nil {
			return err
		}
	}
	// The engine's from now on: its entries can no longer be added or removed by the
	// sandbox user, and every session mounts it read-only. (Not a walk that changes each
	// file: Deno hard-links its own binary in there.)
	if err := os.Chown(dir, os.Getuid(), os.Getgid()); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	e.code.dir = dir
	e.code.ready.Store(true)
	return nil
}

func (e *Engine) fillCodeOnce(ctx context.Context, dir string) error {
	if !e.adm.procs.TryAcquire() {
		return errNoRoom
	}
	s := &slot{g: e.adm.procs}
	if err := e.adm.starts.Acquire(ctx); err != nil {
		s.release()
		return err
	}
	defer e.adm.starts.Release()
	p, err := e.startProcWith(ctx, e.currentBase(), false, s, codeMount{dir: dir, fill: true})
	if err != nil {
		return err
	}
	defer p.close("the compiled-code cache is filled")
	_, err = p.call(ctx, loadReq{Op: "load", Warm: true}, nil)
	return err
}
