package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// Isolation modes.
const (
	// IsolationStrict runs each session process under bubblewrap (new user, PID, mount,
	// IPC, UTS and, without an allowlist, network namespaces; a read-only view of the
	// runtime only) in a cgroup of its own (memory, tasks, freezer). The default.
	IsolationStrict = "strict"
	// IsolationProcess runs each session in its own process with Deno's permissions as
	// the only wall. An operator's explicit choice where namespaces or cgroups are not
	// available (some containers); never picked silently.
	IsolationProcess = "process"
)

// Config holds the engine's limits and locations. The zero value is not usable: start
// from DefaultConfig.
type Config struct {
	// DenoPath, RuntimeDir and PyodideDir are found by Locate when empty.
	DenoPath   string
	RuntimeDir string // holds host.ts and the Worker's modules (proc.WorkerEntry)
	PyodideDir string // the pyodide npm package (pyodide.mjs, pyodide.asm.wasm, …)

	WarmPool    int // session processes kept restored from the base snapshot, at least
	WarmPoolMax int // the most the pool grows to when bursts of new sessions come
	WarmSpares  int // primed processes kept for restoring saved sessions (each costs a warm-up restore)
	MaxLive     int // live session processes; the least recently used is evicted
	// MaxProcesses bounds the session processes of the node, starting, live and pooled
	// together; 0 sizes it by the machine's memory (AutoMaxProcesses). A run that needs a
	// process past it waits in a fair queue, while idle sessions are evicted to make room.
	MaxProcesses int
	// MaxStarting bounds the processes starting or restoring at once (0: one per CPU):
	// a start is CPU-bound, so more at once only makes each slower.
	MaxStarting  int
	AdmitQueue   int           // runs that may wait for a process on the node; past it, 429
	AdmitTimeout time.Duration // the longest a run waits for a process before a 429
	IdleTimeout  time.Duration // a session idle this long is evicted (its state is in Redis)

	Isolation   string // IsolationStrict or IsolationProcess
	SandboxUser string // the unprivileged user session processes run as when the server is root
	// Cgroups says whether each session process gets a cgroup of its own in strict
	// mode: proc.CgroupsAuto (where the server can write one; else rlimits and a uid per
	// process bound it), proc.CgroupsRequired (refuse to start without) or proc.CgroupsOff.
	Cgroups string
	// FirstUID is the first of the uids session processes run as where they have no
	// cgroup: one per process, as many as MaxProcesses and a few for the operator's
	// commands. Nothing else on the host may use them.
	FirstUID int
	// MemoryMerge lets the kernel merge identical pages of session processes (KSM,
	// PR_SET_MEMORY_MERGE) where it can: more sessions per GiB for some CPU (docs/operating.md).
	MemoryMerge bool

	Timeout    time.Duration // default per run
	MaxTimeout time.Duration // the most a caller may ask for
	Grace      time.Duration // how long code may ignore the interrupt before its process is killed
	// RestoreTimeout bounds bringing a session back (restore, packages, replay); a
	// process that takes longer is killed.
	RestoreTimeout time.Duration
	// LeaseTTL is how long a session's lease outlives its node's last renewal: another
	// node takes over a dead node's sessions after it, and a node that stood still longer
	// (a paused VM) loses the runs it held.
	LeaseTTL time.Duration

	MemoryBytes int64 // the interpreter's WebAssembly heap: past it Python gets MemoryError
	// RuntimeOverheadBytes is what Deno, V8 and the compiled wasm need beside the heap:
	// the kernel caps a whole session process at MemoryBytes + RuntimeOverheadBytes.
	RuntimeOverheadBytes int64
	MaxStateBytes        int64 // a session's durable state (heap delta, files, replay log), both tiers
	// HotStateBytes bounds what one session keeps in Redis when the server has a cold tier
	// (Postgres): its heap and larger files live there, Redis keeps their names.
	HotStateBytes int64

	MaxOutput        int   // bytes of stdout and of stderr per run
	MaxCode          int   // bytes of code per run
	MaxArtifacts     int   // files returned per run
	MaxArtifactBytes int64 // size of one returned file
	MaxDataBytes     int64 // total of Request.Data per run
	MaxDisplays      int   // display items (display(), rich results, figures) per run
	MaxDisplayBytes  int64 // bytes of display items per run (images as base64)

	NetworkAllow []string // host or host:port; empty means no network

	// The package settings: where wheels come from, the cache and its bounds, and
	// micropip's index (described in internal/pkgs, which reads them as they are).
	pkgs.Settings

	// Preload is imported by every new interpreter before the base snapshot is taken:
	// a session's first import of these is instant and costs its state nothing.
	Preload []string

	SessionTTL time.Duration
	// CheckpointDelay is how long after a session's last run its heap is saved; runs
	// before that are durable by the session's log and replay on a restore.
	CheckpointDelay time.Duration
	ForceReplay     bool // persist every session as packages + cell replay, as compiled-extension sessions are
	QueueDepth      int  // runs that may wait for one session, across nodes
	RedisPrefix     string
}

// DefaultConfig returns the engine's defaults (Settings'); locations are left for
// Locate.
func DefaultConfig() Config {
	c := Config{RedisPrefix: "sandchat:"}
	sandchat.Defaults(settings, &c)
	return c
}

// Validate refuses values the engine cannot honour, each with a message naming its
// setting's variable (Settings).
func (c Config) Validate() error { return sandchat.Check(settings, &c) }

func validHost(h string) error {
	if h == "" || strings.ContainsAny(h, "/ ,*@") {
		return errors.New("want host or host:port, without scheme or path")
	}
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return errors.New("bad port")
		}
		host = hh
	}
	if host == "" {
		return errors.New("empty host")
	}
	return nil
}

// Package sources: the official distribution of the pinned Pyodide, or none.
const (
	CDNOfficial = "official"
	CDNOff      = "off"
	officialCDN = "https://cdn.jsdelivr.net/pyodide/v%s/full/"
)

// Locate fills DenoPath, RuntimeDir and PyodideDir when they are empty, looking for
// sandbox/runtime next to the executable and above the working directory, so both an
// installed binary and `go test` find an `npm ci`-ed runtime without configuration;
// and it turns PackageCDN's words into a URL (or none).
// Whatever it cannot find stays empty; Start then reports why.
func Locate(c Config) Config {
	if c.RuntimeDir == "" {
		c.RuntimeDir = findRuntimeDir()
	}
	if c.PyodideDir == "" && c.RuntimeDir != "" {
		if p := filepath.Join(c.RuntimeDir, "node_modules", "pyodide"); fileExists(filepath.Join(p, "pyodide.mjs")) {
			c.PyodideDir = p
		}
	}
	if c.DenoPath == "" {
		c.DenoPath = findDeno(c.RuntimeDir)
	}
	if c.PackageDir == "" {
		c.PackageDir = c.PyodideDir
	}
	switch c.PackageCDN {
	case CDNOff:
		c.PackageCDN = ""
	case CDNOfficial:
		c.PackageCDN = ""
		if v := pyodideVersion(c.PyodideDir); v != "" {
			c.PackageCDN = fmt.Sprintf(officialCDN, v)
		}
	}
	if c.PackageCacheDir == "" && (c.PackageCDN != "" || !c.PipOff) {
		c.PackageCacheDir = filepath.Join(os.TempDir(), "sandchat-packages")
	}
	return c
}

func findRuntimeDir() string {
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, s := range starts {
		d := s
		for range 6 {
			for _, c := range []string{filepath.Join(d, "sandbox", "runtime"), filepath.Join(d, "runtime"), d} {
				if fileExists(filepath.Join(c, "host.ts")) && fileExists(filepath.Join(c, proc.WorkerEntry)) {
					return c
				}
			}
			p := filepath.Dir(d)
			if p == d {
				break
			}
			d = p
		}
	}
	return ""
}

func findDeno(runtimeDir string) string {
	if runtimeDir != "" {
		if p := filepath.Join(runtimeDir, "node_modules", "deno", "deno"); isExecutable(p) {
			return p
		}
		if m, _ := filepath.Glob(filepath.Join(runtimeDir, "node_modules", "@deno", "*", "deno")); len(m) > 0 {
			for _, p := range m {
				if isExecutable(p) {
					return p
				}
			}
		}
	}
	if p, err := exec.LookPath("deno"); err == nil {
		return p
	}
	return ""
}

// extraUIDs are the session uids beyond the node's bound: an operator's doctor, exec or
// bench beside a full server takes its own.
const extraUIDs = 16

// jailSpec is what the confinement of session processes is made from; bases is the
// directory of the packed base snapshots processes read (basepack.go); maxProcs, the
// node's bound on session processes.
func (c Config) jailSpec(bases string, maxProcs int) proc.Spec {
	return proc.Spec{
		Strict: c.Isolation != IsolationProcess, SandboxUser: c.SandboxUser,
		DenoPath: c.DenoPath, RuntimeDir: c.RuntimeDir, PyodideDir: c.PyodideDir, PackageDir: c.PackageDir,
		PackageCacheDir: c.PackageCacheDir, BaseDir: bases, MemoryBytes: c.MemoryBytes, RuntimeOverheadBytes: c.RuntimeOverheadBytes,
		Net: netAllow(c), Cgroups: c.Cgroups, FirstUID: c.FirstUID, Slots: maxProcs + extraUIDs, MemoryMerge: c.MemoryMerge,
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// limits are the settings a session keeps to.
func (c Config) limits() session.Limits {
	return session.Limits{Timeout: c.Timeout, Grace: c.Grace, RestoreTimeout: c.RestoreTimeout,
		MaxOutput: c.MaxOutput, MaxArtifacts: c.MaxArtifacts, MaxArtifactBytes: c.MaxArtifactBytes,
		MaxDisplays: c.MaxDisplays, MaxDisplayBytes: c.MaxDisplayBytes, MaxDataBytes: c.MaxDataBytes, MaxStateBytes: c.MaxStateBytes,
		CheckpointDelay: c.CheckpointDelay, SessionTTL: c.SessionTTL, ForceReplay: c.ForceReplay, PipOff: c.PipOff}
}
