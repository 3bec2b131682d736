package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/url"
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
	"github.com/sandchat/sandchat/sandbox/internal/state"
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

// DefaultConfig returns the limits of DESIGN §4; locations are left for Locate.
func DefaultConfig() Config {
	return Config{
		WarmPool:             2,
		WarmPoolMax:          8,
		WarmSpares:           1,
		MaxLive:              16,
		AdmitQueue:           256,
		AdmitTimeout:         30 * time.Second,
		IdleTimeout:          10 * time.Minute,
		Isolation:            IsolationStrict,
		SandboxUser:          "nobody",
		Timeout:              30 * time.Second,
		MaxTimeout:           300 * time.Second,
		Grace:                3 * time.Second,
		RestoreTimeout:       2 * time.Minute,
		LeaseTTL:             state.LeaseTTL,
		MemoryBytes:          512 << 20,
		RuntimeOverheadBytes: 384 << 20,
		MaxStateBytes:        64 << 20,
		HotStateBytes:        16 << 20,
		MaxOutput:            1 << 20,
		MaxCode:              256 << 10,
		MaxArtifacts:         20,
		MaxArtifactBytes:     10 << 20,
		MaxDataBytes:         64 << 20,
		MaxDisplays:          50,
		MaxDisplayBytes:      16 << 20,
		SessionTTL:           24 * time.Hour,
		CheckpointDelay:      2 * time.Second,
		QueueDepth:           8,
		RedisPrefix:          "sandchat:",
		Settings: pkgs.Settings{
			PackageCDN:           CDNOfficial,
			PackageCacheMaxBytes: 2 << 30,
			PipIndex:             "https://pypi.org/pypi/",
			PipAllow:             []string{"*"},
			PipHosts:             []string{"files.pythonhosted.org"},
			PipMaxPackages:       20,
			PipMaxBytes:          100 << 20,

			// What the package fetcher may take for a run, a session and the node.
			PackageCacheMaxFiles:     10000,
			PackageRunMaxFiles:       64,
			PackageRunMaxBytes:       512 << 20,
			PackageRunMaxFetches:     64,
			PackageSessionMaxFiles:   256,
			PackageSessionMaxBytes:   1 << 30,
			PackageSessionMaxFetches: 256,
			PipMaxIndexRequests:      40,
		},
	}
}

// Validate refuses values the engine cannot honour, with a message naming the setting.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.WarmPool < 0 || c.WarmPool > 64 {
		bad("sandbox warm pool must be between 0 and 64, got %d", c.WarmPool)
	}
	if c.WarmPoolMax < c.WarmPool || c.WarmPoolMax > 64 {
		bad("sandbox warm pool max must be between the warm pool (%d) and 64, got %d", c.WarmPool, c.WarmPoolMax)
	}
	if c.WarmSpares < 0 || c.WarmSpares > 8 {
		bad("sandbox warm spares must be between 0 and 8, got %d", c.WarmSpares)
	}
	if c.MaxLive < 1 || c.MaxLive > 4096 {
		bad("sandbox max live sessions must be between 1 and 4096, got %d", c.MaxLive)
	}
	if c.MaxProcesses != 0 && (c.MaxProcesses < 2 || c.MaxProcesses > 4096) {
		bad("sandbox max processes must be 0 (sized by memory) or between 2 and 4096, got %d", c.MaxProcesses)
	}
	if c.MaxStarting < 0 || c.MaxStarting > 256 {
		bad("sandbox max starting must be 0 (one per CPU) or between 1 and 256, got %d", c.MaxStarting)
	}
	if c.AdmitQueue < 0 || c.AdmitQueue > 100000 {
		bad("sandbox admission queue must be between 0 and 100000, got %d", c.AdmitQueue)
	}
	if c.AdmitTimeout < 100*time.Millisecond || c.AdmitTimeout > 10*time.Minute {
		bad("sandbox admission timeout must be between 100ms and 10m, got %s", c.AdmitTimeout)
	}
	if c.IdleTimeout < time.Second {
		bad("sandbox idle timeout must be at least 1s, got %s", c.IdleTimeout)
	}
	if c.Isolation != IsolationStrict && c.Isolation != IsolationProcess {
		bad("sandbox isolation must be %q or %q, got %q", IsolationStrict, IsolationProcess, c.Isolation)
	}
	if c.SandboxUser == "" {
		bad("sandbox user must be set")
	}
	if c.RestoreTimeout < time.Second || c.RestoreTimeout > 30*time.Minute {
		bad("sandbox restore timeout must be between 1s and 30m, got %s", c.RestoreTimeout)
	}
	if c.Timeout <= 0 {
		bad("sandbox timeout must be positive, got %s", c.Timeout)
	}
	if c.MaxTimeout < c.Timeout {
		bad("sandbox max timeout (%s) must not be below the timeout (%s)", c.MaxTimeout, c.Timeout)
	}
	if c.Grace < 100*time.Millisecond || c.Grace > time.Minute {
		bad("sandbox grace must be between 100ms and 1m, got %s", c.Grace)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL > 5*time.Minute {
		bad("sandbox lease TTL must be between 1s and 5m, got %s", c.LeaseTTL)
	}
	if c.MemoryBytes < 64<<20 || c.MemoryBytes > 4<<30 {
		bad("sandbox memory must be between 64 MiB and 4 GiB (wasm32), got %d bytes", c.MemoryBytes)
	}
	if c.RuntimeOverheadBytes < 128<<20 || c.RuntimeOverheadBytes > 8<<30 {
		bad("sandbox runtime overhead must be between 128 MiB and 8 GiB, got %d bytes", c.RuntimeOverheadBytes)
	}
	if c.MaxStateBytes < 1<<20 || c.MaxStateBytes > 4<<30 {
		bad("sandbox max state must be between 1 MiB and 4 GiB, got %d bytes", c.MaxStateBytes)
	}
	if c.HotStateBytes < 1<<20 || c.HotStateBytes > 4<<30 {
		bad("sandbox hot state must be between 1 MiB and 4 GiB, got %d bytes", c.HotStateBytes)
	}
	if c.MaxOutput < 1024 {
		bad("sandbox max output must be at least 1024 bytes, got %d", c.MaxOutput)
	}
	if c.MaxCode < 1024 {
		bad("sandbox max code must be at least 1024 bytes, got %d", c.MaxCode)
	}
	if c.MaxArtifacts < 0 || c.MaxArtifactBytes < 0 || c.MaxDataBytes < 0 {
		bad("sandbox artifact and data limits must not be negative")
	}
	if c.MaxDisplays < 0 || c.MaxDisplays > 1000 || c.MaxDisplayBytes < 0 || c.MaxDisplayBytes > 256<<20 {
		bad("sandbox display limits must be 0–1000 items and 0–256 MiB per run, got %d and %d bytes", c.MaxDisplays, c.MaxDisplayBytes)
	}
	for _, h := range c.NetworkAllow {
		if err := validHost(h); err != nil {
			bad("sandbox network allowlist entry %q: %v", h, err)
		}
	}
	if c.PackageCDN != "" && c.PackageCDN != CDNOfficial && c.PackageCDN != CDNOff {
		u, err := url.Parse(c.PackageCDN)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("sandbox package CDN must be %q, %q or an http(s) URL, got %q", CDNOfficial, CDNOff, c.PackageCDN)
		}
	}
	if c.PackageCacheMaxBytes < 16<<20 {
		bad("sandbox package cache bound must be at least 16 MiB, got %d bytes", c.PackageCacheMaxBytes)
	}
	if c.PackageCacheMaxFiles < 1 || c.PackageRunMaxFiles < 1 || c.PackageSessionMaxFiles < 1 ||
		c.PackageRunMaxBytes < 1<<20 || c.PackageSessionMaxBytes < 1<<20 || c.PackageRunMaxFetches < 0 || c.PackageSessionMaxFetches < 0 {
		bad("sandbox package bounds must be at least 1 file and 1 MiB (fetches at least 0), got cache %d files, run %d files %d bytes %d fetches, session %d files %d bytes %d fetches",
			c.PackageCacheMaxFiles, c.PackageRunMaxFiles, c.PackageRunMaxBytes, c.PackageRunMaxFetches,
			c.PackageSessionMaxFiles, c.PackageSessionMaxBytes, c.PackageSessionMaxFetches)
	}
	if !c.PipOff {
		if u, err := url.Parse(c.PipIndex); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("sandbox pip index must be an http(s) URL, got %q", c.PipIndex)
		}
		for _, n := range c.PipAllow {
			if n != "*" && !pkgs.ValidName(n) {
				bad("sandbox pip allowlist entry %q is not a project name or *", n)
			}
		}
		for _, h := range c.PipHosts {
			if err := validHost(h); err != nil {
				bad("sandbox pip host %q: %v", h, err)
			}
		}
		if c.PipMaxPackages < 1 || c.PipMaxPackages > 500 || c.PipMaxBytes < 1<<20 || c.PipMaxBytes > pkgs.MaxWheelBytes {
			bad("sandbox pip limits must be 1–500 packages and 1 MiB–512 MiB per install, got %d and %d bytes", c.PipMaxPackages, c.PipMaxBytes)
		}
		if c.PipMaxIndexRequests < 1 || c.PipMaxIndexRequests > 2000 {
			bad("sandbox pip index requests per install must be 1–2000, got %d", c.PipMaxIndexRequests)
		}
	}
	if err := CheckPreload(c.Preload); err != nil {
		bad("sandbox preload: %s", strings.TrimSuffix(sandchat.ErrorMessage(err), "."))
	}
	if c.CheckpointDelay < 0 || c.CheckpointDelay > 24*time.Hour {
		bad("sandbox checkpoint delay must be between 0 and 24h, got %s", c.CheckpointDelay)
	}
	if c.SessionTTL < time.Minute {
		bad("sandbox session TTL must be at least 1m, got %s", c.SessionTTL)
	}
	if c.QueueDepth < 0 || c.QueueDepth > 1000 {
		bad("sandbox queue depth must be between 0 and 1000, got %d", c.QueueDepth)
	}
	return errors.Join(errs...)
}

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

// jailSpec is what the confinement of session processes is made from; bases is the
// directory of the packed base snapshots processes read (basepack.go).
func (c Config) jailSpec(bases string) proc.Spec {
	return proc.Spec{
		Strict: c.Isolation != IsolationProcess, SandboxUser: c.SandboxUser,
		DenoPath: c.DenoPath, RuntimeDir: c.RuntimeDir, PyodideDir: c.PyodideDir, PackageDir: c.PackageDir,
		PackageCacheDir: c.PackageCacheDir, BaseDir: bases, MemoryBytes: c.MemoryBytes, RuntimeOverheadBytes: c.RuntimeOverheadBytes,
		Net: netAllow(c),
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
