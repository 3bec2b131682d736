package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// startProc starts a session process (internal/proc) and primes it with base, packed
// once per base (basepack.go); base is nil for the process that boots a new base. s is
// the process's slot under the node's bound (admission.go); it is given back when the
// process is gone. The process mounts the compiled-code cache once it is filled.
func (e *Engine) startProc(ctx context.Context, base []byte, warmup bool, s *slot) (*proc.Process, error) {
	return e.startProcWith(ctx, base, warmup, s, e.code.Mount())
}

func (e *Engine) startProcWith(ctx context.Context, base []byte, warmup bool, s *slot, code proc.CodeMount) (*proc.Process, error) {
	return e.launch.Start(ctx, proc.Start{
		Packed: e.packs.get(base), Base: base, Warmup: warmup,
		Config: e.runtimeConfig(), Code: code, Release: s.release,
	})
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
func (e *Engine) fillCode(ctx context.Context) {
	if !e.launch.Jail.Strict() || e.code.Ready() {
		return
	}
	if err := e.fillCodeDir(ctx); err != nil && e.ctx.Err() == nil {
		e.log.Warn("sandbox compiled-code cache not filled: session processes start without it", "err", err)
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

func (e *Engine) fillCodeDir(ctx context.Context) error {
	root, err := codeRoot()
	if err != nil {
		return err
	}
	final := filepath.Join(root, e.launch.Jail.CodeKey())
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		e.code.Filled(final)
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
	if uid, gid := e.launch.Jail.User(); uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
	}
	for range codeFills {
		if err := e.fillCodeOnce(ctx, dir); err != nil {
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
	e.code.Filled(final)
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
	p, err := e.startProcWith(ctx, e.currentBase(), false, s, e.code.Filling(dir))
	if err != nil {
		return err
	}
	defer p.Close("the compiled-code cache is filled")
	_, err = p.Call(ctx, proc.LoadReq{Op: "load", Warm: true}, nil)
	return err
}
