package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// errProcGone is returned for a call in flight when its session process exits.
var errProcGone = errors.New("sandbox session process exited")

// procError is an operation the process refused or its interpreter failed. kind names
// a refusal the engine acts on ("replay": a replayed cell outlived its time limit).
type procError struct{ msg, kind string }

func (e *procError) Error() string { return "sandbox process: " + e.msg }

// proc is one session process (or a warm spare) and the engine's end of its protocol.
// Calls are one at a time; an interrupt may be sent while one waits.
type proc struct {
	id       string
	log      *slog.Logger
	cmd      *exec.Cmd
	cg       *cgroup // nil without cgroup isolation
	req      *os.File
	maxFrame int
	tmp      string     // DENO_DIR of a process without a private /tmp
	pkgs     *pkgs.View // its view of the package cache; nil without a fetcher
	base     []byte     // the base snapshot it was primed with (the engine's copy, shared)

	callMu sync.Mutex // one call at a time
	wmu    sync.Mutex // frame writes
	mu     sync.Mutex
	nextID int64
	wantID int64
	reply  chan frame
	onOut  func(stream, chunk string)
	onDisp func(kind, item string) error
	onPip  func(seq int64, req json.RawMessage) pipDone
	onRun  func() // the run's code starts (its packages are loaded)
	frozen bool
	gen    uint64 // bumped by every thaw: a freeze asked for before it is void

	done    chan struct{}
	why     atomic.Pointer[string]
	console *consoleLog
	started time.Time
	slot    *slot // its place under the node's bound, given back when it is gone
}

// startProc starts a session process and primes it: Deno up, Pyodide imported and its
// wasm compiled, the base snapshot handed over. The process keeps the base only until
// its interpreter is loaded from it, then a hash per heap block; the XOR of a session's
// heap against the base is done here, against the engine's one copy (xorBase). base is
// nil for the process that boots a new base. s is the process's slot under the node's
// bound (admission.go); it is given back when the process is gone.
func (e *Engine) startProc(ctx context.Context, base []byte, warmup bool, s *slot) (*proc, error) {
	return e.startProcWith(ctx, base, warmup, s, e.code.mount())
}

// startProcWith is startProc with the compiled-code cache the process mounts.
func (e *Engine) startProcWith(ctx context.Context, base []byte, warmup bool, s *slot, code codeMount) (_ *proc, err error) {
	j := e.jail
	id := "s" + newToken()[:12]
	p := &proc{id: id, log: e.log.With("proc", id), maxFrame: e.maxReplyBytes(), done: make(chan struct{}),
		reply: make(chan frame, 1), started: time.Now(), slot: s, base: base}
	p.console = &consoleLog{log: p.log}
	defer func() {
		if err != nil {
			p.kill("start failed")
			p.cleanup()
			if p.cmd == nil {
				// Never started: no wait() will give the slot back.
				p.slot.release()
			}
		}
	}()
	if j.cgroups != nil {
		if p.cg, err = j.cgroups.create(id, j.memoryLimit(), sessionTasks); err != nil {
			return nil, err
		}
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		repR.Close()
		repW.Close()
		return nil, err
	}
	defer gateW.Close()
	if j.uid >= 0 {
		// The process reopens its ends through /dev/fd as the sandbox user.
		for _, f := range []*os.File{reqR, repW} {
			if err := f.Chown(j.uid, j.gid); err != nil {
				return nil, fmt.Errorf("chown protocol pipe: %w", err)
			}
		}
	}
	if e.fetch != nil {
		if p.pkgs, err = e.fetch.OpenView(id, j.mode != IsolationProcess); err != nil {
			return nil, err
		}
	}
	cmd := j.command(p.pkgs.HostDir(), code)
	if j.mode == IsolationProcess {
		if p.tmp, err = os.MkdirTemp(e.cacheDir, "deno-"); err != nil {
			return nil, err
		}
		if j.uid >= 0 {
			_ = os.Chown(p.tmp, j.uid, j.gid)
		}
		cmd.Env = append(cmd.Env, "DENO_DIR="+p.tmp, "HOME="+p.tmp)
	}
	cmd.ExtraFiles = []*os.File{reqR, repW, gateR}
	cmd.Stdout, cmd.Stderr = p.console, p.console
	p.cmd, p.req = cmd, reqW
	err = cmd.Start()
	reqR.Close()
	repW.Close()
	gateR.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		p.cmd = nil
		return nil, fmt.Errorf("start session process: %w", err)
	}
	go p.wait()
	go p.read(repR)
	if p.cg != nil {
		if err := p.cg.add(cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("join cgroup: %w", err)
		}
	}
	if _, err := gateW.Write([]byte("go\n")); err != nil && p.cg != nil {
		return nil, fmt.Errorf("open gate: %w", err)
	}
	var o blobs
	prime := primeReq{Op: "prime", Config: e.runtimeConfig(), Base: o.add(e.packs.get(base)), Warmup: warmup}
	configureView(p.pkgs, &prime.Config, e.cfg.PackageCacheDir)
	if _, err := p.call(ctx, prime, &o); err != nil {
		return nil, fmt.Errorf("prime session process: %w%s", err, p.console.tail())
	}
	return p, nil
}

func (p *proc) wait() {
	err := p.cmd.Wait()
	if p.cg != nil && p.cg.oomKilled() {
		p.setWhy("the session exceeded its memory limit and was stopped by the kernel")
	}
	p.why.CompareAndSwap(nil, ptr(fmt.Sprintf("the sandbox process stopped unexpectedly (%v)", err)))
	// Whatever the process started goes with it.
	if p.cg != nil {
		p.cg.kill()
	}
	// Its group gone, the process no longer counts against the node's bound: only then
	// may another take its place.
	p.cleanup()
	p.slot.release()
	close(p.done)
}

func ptr[T any](v T) *T { return &v }

func (p *proc) setWhy(why string) { p.why.CompareAndSwap(nil, &why) }

// reason says why the process is gone.
func (p *proc) reason() string {
	if s := p.why.Load(); s != nil {
		return *s
	}
	return "the sandbox process stopped unexpectedly"
}

func (p *proc) cleanup() {
	if p.cg != nil {
		p.cg.remove()
	}
	if p.tmp != "" {
		_ = os.RemoveAll(p.tmp)
	}
	p.pkgs.Close()
}

// freezeSoon freezes the process off the caller's path (a v1 freezer write takes a few
// ms), unless a call thaws it first.
func (p *proc) freezeSoon() {
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	go p.freezeAt(gen)
}

// freeze stops every thread of the process between runs: timers and Workers that user
// code left behind get no CPU until its next run. Without a cgroup, SIGSTOP does it.
func (p *proc) freeze() {
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	p.freezeAt(gen)
}

func (p *proc) freezeAt(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen || p.gen != gen || !p.alive() {
		return
	}
	var err error
	if p.cg != nil {
		err = p.cg.freeze(true)
	} else {
		err = p.cmd.Process.Signal(syscall.SIGSTOP)
	}
	p.frozen = err == nil
}

func (p *proc) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	if !p.frozen {
		return
	}
	if p.cg != nil {
		_ = p.cg.freeze(false)
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.frozen = false
}

// kill ends the process and everything it started; why is what its session is told.
func (p *proc) kill(why string) {
	p.setWhy(why)
	if p.cg != nil {
		p.cg.kill()
	}
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		if p.cg == nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	if p.req != nil {
		_ = p.req.Close()
	}
}

// close stops the process and waits for it to be gone.
func (p *proc) close(why string) {
	if p.cmd == nil {
		return
	}
	p.kill(why)
	<-p.done
}

// memory is what the kernel charges the session for: its cgroup's charge (page cache of
// the runtime files it read included), or without a cgroup its resident set.
func (p *proc) memory() int64 {
	if p.cg != nil {
		return p.cg.memory()
	}
	return p.rss()
}

// rss is the resident memory of the session's processes.
func (p *proc) rss() int64 { return p.sumProc("status", "VmRSS:") }

// pss is the proportional set size of the session's processes: their private memory
// plus their share of what they map with others (the Deno binary), i.e. what one more
// session costs the machine, where RSS counts the shared pages in full in each.
func (p *proc) pss() int64 { return p.sumProc("smaps_rollup", "Pss:") }

// sumProc adds up a "name: N kB" field of /proc/PID/file over the session's processes.
func (p *proc) sumProc(file, field string) int64 {
	pids := []int{p.cmd.Process.Pid}
	if p.cg != nil {
		pids = p.cg.pids()
	}
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

// consoleLog takes a session process's stdout and stderr, which user code can write to:
// it keeps the last few KiB for error reports and logs a bounded number of lines a
// minute, so a session can neither fill the disk nor flood the server's logs.
type consoleLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	last   []byte
	window time.Time
	lines  int
}

const consoleKeep = 4 << 10

func (c *consoleLog) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = append(c.last, b...)
	if len(c.last) > consoleKeep {
		c.last = append([]byte(nil), c.last[len(c.last)-consoleKeep:]...)
	}
	if time.Since(c.window) > time.Minute {
		c.window, c.lines = time.Now(), 0
	}
	for _, line := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		if c.lines++; c.lines <= 20 {
			c.log.Debug("sandbox process console", "line", string(line[:min(len(line), 500)]))
		}
	}
	return len(b), nil
}

// tail is the end of the console, for an error message.
func (c *consoleLog) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(string(c.last))
	if s == "" {
		return ""
	}
	if len(s) > 1000 {
		s = s[len(s)-1000:]
	}
	return " (process said: " + s + ")"
}
