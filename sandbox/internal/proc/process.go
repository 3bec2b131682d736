package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// ErrGone is returned for a call in flight when its session process exits.
var ErrGone = errors.New("sandbox session process exited")

// Error is an operation the process refused or its interpreter failed. Kind names a
// refusal the engine acts on ("replay": a replayed cell outlived its time limit).
type Error struct{ Msg, Kind string }

func (e *Error) Error() string { return "sandbox process: " + e.Msg }

// Process is one session process (or a warm spare) and the engine's end of its
// protocol. Calls are one at a time; an interrupt may be sent while one waits.
type Process struct {
	id  string
	log *slog.Logger
	cmd *exec.Cmd
	cg  *Cgroup // nil without cgroup isolation
	// unlease gives back the uid of a process without a cgroup once its tasks are gone
	// (rlimits.go); nothing for the others.
	unlease func()
	// oomKills is the OOM kills in the server's own memory group when a process without
	// a cgroup started: one more by its end tells that the kernel took it for memory.
	oomKills int64
	req      *os.File
	maxFrame int
	tmp      string     // DENO_DIR of a process without a private /tmp
	pkgs     *pkgs.View // its view of the package cache; nil without a fetcher
	base     []byte     // the base snapshot it was primed with (the engine's copy, shared)

	callMu sync.Mutex // one call at a time: held from a request's write to its reply
	wmu    sync.Mutex // guards writes to req: one frame at a time (a call's, an interrupt, a pip answer)
	// mu guards the fields below it up to done: the call in flight (nextID, wantID), the
	// hooks the reader routes a run's frames to, and the freezer's state. It is held for
	// a freezer write (freezeAt, thaw), never while waiting on the process.
	mu     sync.Mutex
	nextID int64
	wantID int64
	reply  chan Frame // set at start; the reader sends the awaited reply on it
	onOut  func(stream, chunk string, cut bool)
	onDisp func(kind, item string) error
	onPip  func(seq int64, req json.RawMessage) PipDone
	onRun  func() // the run's code starts (its packages are loaded)
	// frameLimit bounds the frames read while a call waits (replyLimit); 0: maxFrame.
	frameLimit int
	// sink takes the binary section of the awaited reply as it arrives (CallStream).
	sink    func(js json.RawMessage, bin io.Reader) error
	reaped  atomic.Bool // its pid is the kernel's again: no signal to the tree it was
	frozen  bool
	stopped []int  // without a cgroup: the tasks the freeze stopped, for thaw
	gen     uint64 // bumped by every thaw: a freeze asked for before it is void

	done    chan struct{}
	why     atomic.Pointer[string]
	oom     atomic.Bool // the kernel stopped it for its memory cap (set before done)
	console *consoleLog
	started time.Time
	release func() // gives its place under the node's bound back, once it is gone
}

// Launcher starts session processes: the confinement, and what every process is told.
type Launcher struct {
	Jail     *Jail
	Log      *slog.Logger
	TmpDir   string        // where a process without a private /tmp gets its DENO_DIR
	Fetch    *pkgs.Fetcher // nil: no package cache
	CacheDir string        // the package cache, as the configuration names it
	MaxFrame int           // the largest frame a process may send
}

// Start says how to start one process.
type Start struct {
	// BaseFile names the base snapshot as the process is primed with it: a file in the
	// jail's BaseDir (sandbox/basepack.go); "" for the process that boots a new base.
	BaseFile string
	// Base is the same base as the engine keeps it, which the process's deltas are
	// XOR-ed against.
	Base []byte
	// Warmup restores the base once in a throwaway Worker (spares, see PrimeReq).
	Warmup bool
	Config RuntimeConfig
	// Code is the compiled-code cache the process mounts (codecache.go).
	Code CodeMount
	// Release gives the process's place under the node's bound back; it is called once
	// the process is gone, or at once when it never started.
	Release func()
}

// Start starts a session process and primes it: Deno up, Pyodide imported and its wasm
// compiled, the base snapshot handed over. The process keeps the base only until its
// interpreter is loaded from it, then a hash per heap block; the XOR of a session's heap
// against the base is done by the engine, against its one copy.
func (l *Launcher) Start(ctx context.Context, o Start) (_ *Process, err error) {
	j := l.Jail
	id := "s" + state.NewToken()[:12]
	release := o.Release
	if release == nil {
		release = func() {}
	}
	p := &Process{id: id, log: l.Log.With("proc", id), maxFrame: l.MaxFrame, done: make(chan struct{}),
		reply: make(chan Frame, 1), started: time.Now(), release: sync.OnceFunc(release), base: o.Base, unlease: func() {}}
	p.console = &consoleLog{log: p.log}
	defer func() {
		if err != nil {
			p.Kill("start failed")
			p.cleanup()
			if p.cmd == nil {
				// Never started: no wait() will give the place back.
				p.release()
			}
		}
	}()
	if j.Cgroups != nil {
		if p.cg, err = j.Cgroups.create(id, j.MemoryLimit(), SessionTasks); err != nil {
			return nil, err
		}
	}
	uid := j.uid
	// Without a cgroup, each session process runs under a uid of its own, which its
	// RLIMIT_NPROC counts; one that fills the compiled-code cache runs no session's
	// code, and writes the cache as the sandbox user.
	if j.slots != nil && !o.Code.Fill {
		lease, err := j.slots.acquire()
		if err != nil {
			return nil, err
		}
		uid, p.unlease = lease.uid, sync.OnceFunc(lease.release)
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
	launched := false
	defer func() {
		if !launched { // a failure before the process had its ends
			for _, f := range []*os.File{reqR, reqW, repR, repW, gateR} {
				f.Close()
			}
		}
	}()
	if uid >= 0 {
		// The process reopens its ends through /dev/fd as the sandbox user.
		for _, f := range []*os.File{reqR, repW} {
			if err := f.Chown(uid, j.gid); err != nil {
				return nil, fmt.Errorf("chown protocol pipe: %w", err)
			}
		}
	}
	if l.Fetch != nil {
		if p.pkgs, err = l.Fetch.OpenView(id, j.Strict()); err != nil {
			return nil, err
		}
	}
	cmd := j.command(p.pkgs.HostDir(), o.Code, uid)
	if !j.Strict() {
		if p.tmp, err = os.MkdirTemp(l.TmpDir, "deno-"); err != nil {
			return nil, err
		}
		if uid >= 0 {
			_ = os.Chown(p.tmp, uid, j.gid)
		}
		cmd.Env = append(cmd.Env, "DENO_DIR="+p.tmp, "HOME="+p.tmp)
	}
	cmd.ExtraFiles = []*os.File{reqR, repW, gateR}
	cmd.Stdout, cmd.Stderr = p.console, p.console
	p.cmd, p.req = cmd, reqW
	if err = cmd.Start(); err != nil {
		p.cmd = nil
		return nil, fmt.Errorf("start session process: %w", err)
	}
	launched = true
	reqR.Close()
	repW.Close()
	gateR.Close()
	if p.cg == nil {
		p.oomKills = ownOOMKills()
	}
	go p.wait()
	go p.read(repR)
	if p.cg != nil {
		if err := p.cg.add(cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("join cgroup: %w", err)
		}
	}
	if _, err := gateW.Write([]byte("go\n")); err != nil && (p.cg != nil || j.slots != nil || j.merge) {
		return nil, fmt.Errorf("open gate: %w", err)
	}
	prime := PrimeReq{Op: "prime", Config: o.Config, Warmup: o.Warmup}
	// Each process's own list: the engine's is shared by every start.
	prime.Config.Read = slices.Clone(o.Config.Read)
	configureView(p.pkgs, &prime.Config, l.CacheDir)
	if o.BaseFile != "" {
		dir := j.baseDir()
		prime.BasePath = dir + "/" + o.BaseFile
		prime.Config.Read = append(prime.Config.Read, dir)
	}
	if _, err := p.Call(ctx, prime, nil); err != nil {
		return nil, fmt.Errorf("prime session process: %w%s", err, p.console.tail())
	}
	return p, nil
}

func (p *Process) wait() {
	err := p.cmd.Wait()
	p.reaped.Store(true)
	if p.cg != nil && p.cg.oomKilled() {
		p.oom.Store(true)
		p.SetWhy("the session exceeded its memory limit and was stopped by the kernel")
	}
	var ws syscall.WaitStatus
	if st, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		ws = st
	}
	// Killed, or (bubblewrap passes its child's end on) exited with 128 + SIGKILL.
	killed := ws.Signaled() && ws.Signal() == syscall.SIGKILL || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGKILL)
	if p.cg == nil && killed && p.oomKills >= 0 && ownOOMKills() > p.oomKills {
		p.SetWhy("the server ran out of memory (its container's or service's limit) and the kernel stopped this session to free it")
	}
	p.SetWhy(fmt.Sprintf("the sandbox process stopped unexpectedly (%v)", err))
	// Whatever the process started goes with it.
	if p.cg != nil {
		p.cg.kill()
	}
	// Its group gone, the process no longer counts against the node's bound: only then
	// may another take its place.
	p.cleanup()
	p.release()
	close(p.done)
}

// SetWhy records why the process is going, unless a reason is recorded already.
func (p *Process) SetWhy(why string) { p.why.CompareAndSwap(nil, &why) }

// OOMKilled tells whether the kernel killed the process for its session's memory cap
// (its own doing, not the node's); it is known once Done is closed.
func (p *Process) OOMKilled() bool { return p.oom.Load() }

// Reason says why the process is gone.
func (p *Process) Reason() string {
	if s := p.why.Load(); s != nil {
		return *s
	}
	return "the sandbox process stopped unexpectedly"
}

func (p *Process) cleanup() {
	if p.cg != nil {
		p.cg.remove()
	}
	p.unlease()
	if p.tmp != "" {
		_ = os.RemoveAll(p.tmp)
	}
	p.pkgs.Close()
}

// FreezeSoon freezes the process off the caller's path (a v1 freezer write takes a few
// ms), unless a call thaws it first.
func (p *Process) FreezeSoon() {
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	go p.freezeAt(gen)
}

// Freeze stops every thread of the process between runs: timers and Workers that user
// code left behind get no CPU until its next run. Without a cgroup, SIGSTOP to each of
// its tasks does it.
func (p *Process) Freeze() {
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	p.freezeAt(gen)
}

func (p *Process) freezeAt(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen || p.gen != gen || !p.Alive() {
		return
	}
	var err error
	if p.cg != nil {
		err = p.cg.freeze(true)
	} else if !p.reaped.Load() {
		p.stopped = signalTree(p.cmd.Process.Pid, syscall.SIGSTOP)
	}
	p.frozen = err == nil
}

// thaw lets a frozen process run again, and voids a freeze asked for before.
func (p *Process) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	if !p.frozen {
		return
	}
	if p.cg != nil {
		_ = p.cg.freeze(false)
	} else {
		for _, pid := range p.stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		p.stopped = nil
	}
	p.frozen = false
}

// Kill ends the process and everything it started; why is what its session is told.
func (p *Process) Kill(why string) {
	p.SetWhy(why)
	if p.cg != nil {
		p.cg.kill()
	}
	if p.cmd != nil && p.cmd.Process != nil {
		if p.cg == nil && !p.reaped.Load() {
			// Its tasks, stopped or not; the uid's sweep (cleanup) gets any that escaped.
			signalTree(p.cmd.Process.Pid, syscall.SIGKILL)
			signalTree(p.cmd.Process.Pid, syscall.SIGCONT)
		}
		_ = p.cmd.Process.Kill()
	}
	if p.req != nil {
		_ = p.req.Close()
	}
}

// Close stops the process and waits for it to be gone.
func (p *Process) Close(why string) {
	if p.cmd == nil {
		return
	}
	p.Kill(why)
	<-p.done
}

// Memory is what the kernel charges the session for: its cgroup's charge (page cache of
// the runtime files it read included), or without a cgroup its resident set.
func (p *Process) Memory() int64 {
	if p.cg != nil {
		return p.cg.memory()
	}
	return p.RSS()
}

// RSS is the resident memory of the session's processes.
func (p *Process) RSS() int64 { return p.sumProc("status", "VmRSS:") }

// PSS is the proportional set size of the session's processes: their private memory
// plus their share of what they map with others (the Deno binary), i.e. what one more
// session costs the machine, where RSS counts the shared pages in full in each.
func (p *Process) PSS() int64 { return p.sumProc("smaps_rollup", "Pss:") }

// sumProc adds up a "name: N kB" field of /proc/PID/file over the session's processes.
func (p *Process) sumProc(file, field string) int64 {
	var total int64
	for _, pid := range p.Tasks() {
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

// ID names the process (its cgroup, its view of the package cache, its logs).
func (p *Process) ID() string { return p.id }

// Started is when the process was started.
func (p *Process) Started() time.Time { return p.started }

// Base is the base snapshot the process was primed with (the engine's copy, shared).
func (p *Process) Base() []byte { return p.base }

// View is the process's view of the package cache; nil without one.
func (p *Process) View() *pkgs.View { return p.pkgs }

// Done is closed once the process is gone.
func (p *Process) Done() <-chan struct{} { return p.done }

// PID is the process's own pid (the gate's, then bubblewrap's, on the host).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Tasks are the pids of every task of the process: its cgroup's, or without one, the
// process and those below it.
func (p *Process) Tasks() []int {
	if p.cg != nil {
		return p.cg.pids()
	}
	return descendants(p.cmd.Process.Pid)
}

// CgroupDir is the process's cgroup, "" without one.
func (p *Process) CgroupDir() string {
	if p.cg == nil {
		return ""
	}
	return p.cg.dir()
}

// ConsoleTail is the end of what the process printed, for an error message.
func (p *Process) ConsoleTail() string { return p.console.tail() }

// configureView points a session's runtime configuration at its view v: without
// bubblewrap the view is read where it is; without a view the cache is not readable.
func configureView(v *pkgs.View, c *RuntimeConfig, cacheDir string) {
	if cacheDir == "" {
		return
	}
	at := v.Inside()
	c.Read = slices.DeleteFunc(c.Read, func(d string) bool { return d == cacheDir })
	if at != "" {
		c.Read = append(c.Read, at)
	}
	if at == "" || at == cacheDir {
		return
	}
	for _, u := range []*string{c.LockFileURL, c.PackageBaseURL} {
		if u != nil && strings.HasPrefix(*u, cacheDir+"/") {
			*u = at + strings.TrimPrefix(*u, cacheDir)
		}
	}
}
