package sandbox

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Setting is one of the engine's settings (a field of Config): SANDCHAT_<Env> sets it.
type Setting = sandchat.Setting[Config]

// Settings are the engine's settings, each declared once: its variable, its help, its
// default, its form and bounds, and its rule. DefaultConfig and Validate come from it,
// and so do the sandchat command's flags and --help. Sizes take KiB/MiB/GiB suffixes;
// durations Go's form (30s, 24h).
func Settings() []Setting { return settings }

// A setting's parts, by the kind of field.
func text(f func(*Config) *string) sandchat.Value[Config]   { return sandchat.Text(f) }
func list(f func(*Config) *[]string) sandchat.Value[Config] { return sandchat.List(f) }
func boolean(f func(*Config) *bool) sandchat.Value[Config]  { return sandchat.Boolean(f) }
func count(f func(*Config) *int, lo, hi int) sandchat.Value[Config] {
	return sandchat.WholeNumber(f, lo, hi)
}
func bytes64(f func(*Config) *int64, lo, hi int64) sandchat.Value[Config] {
	return sandchat.Bytes(f, lo, hi)
}
func bytesInt(f func(*Config) *int, lo, hi int) sandchat.Value[Config] {
	return sandchat.Bytes(f, lo, hi)
}
func duration(f func(*Config) *time.Duration, lo, hi time.Duration) sandchat.Value[Config] {
	return sandchat.Duration(f, lo, hi)
}

const (
	year = 365 * 24 * time.Hour
	tib  = 1 << 40
)

// whenPip is a rule that holds only while micropip may install (PipOff unset).
func whenPip(rule func(c *Config) error) func(c *Config) error {
	return func(c *Config) error {
		if c.PipOff {
			return nil
		}
		return rule(c)
	}
}

// hosts refuses a list entry that is not host or host:port.
func hosts(field func(*Config) []string) func(c *Config) error {
	return func(c *Config) error {
		for _, h := range field(c) {
			if err := validHost(h); err != nil {
				return fmt.Errorf("%q: %v", h, err)
			}
		}
		return nil
	}
}

var settings = []Setting{
	{Env: "SANDBOX_DENO", Help: "Deno binary; default: sandbox/runtime/node_modules",
		Value: text(func(c *Config) *string { return &c.DenoPath })},
	{Env: "SANDBOX_RUNTIME_DIR", Help: "directory with host.ts and worker/ (the session process runtime); default: found near the binary or working directory",
		Value: text(func(c *Config) *string { return &c.RuntimeDir })},
	{Env: "SANDBOX_PYODIDE_DIR", Help: "Pyodide distribution; default: the runtime's node_modules/pyodide",
		Value: text(func(c *Config) *string { return &c.PyodideDir })},
	{Env: "SANDBOX_PACKAGE_DIR", Help: "mirror of the Pyodide distribution (pyodide-lock.json + wheels) imports are loaded from",
		Value: text(func(c *Config) *string { return &c.PackageDir })},
	{Env: "SANDBOX_PACKAGE_CDN", Def: CDNOfficial, Help: "where the server fetches wheels missing from the package dir, sha256-verified against the lock: official (the pinned Pyodide's own distribution), off, or the base URL of a mirror",
		Value: text(func(c *Config) *string { return &c.PackageCDN }), Rule: func(c *Config) error {
			if c.PackageCDN == "" || c.PackageCDN == CDNOfficial || c.PackageCDN == CDNOff {
				return nil
			}
			if u, err := url.Parse(c.PackageCDN); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("%q is not %s, %s or an http(s) URL", c.PackageCDN, CDNOfficial, CDNOff)
			}
			return nil
		}},
	{Env: "SANDBOX_PACKAGE_CACHE_DIR", Help: "where wheels fetched from the CDN are kept, shared by all sessions; default <tmp>/sandchat-packages",
		Value: text(func(c *Config) *string { return &c.PackageCacheDir })},
	{Env: "SANDBOX_NETWORK_ALLOW", Help: "hosts (host or host:port) Python may reach; empty: no network",
		Value: list(func(c *Config) *[]string { return &c.NetworkAllow }), Rule: hosts(func(c *Config) []string { return c.NetworkAllow })},
	{Env: "SANDBOX_PIP_INDEX", Def: "https://pypi.org/pypi/", Help: "base URL of a PyPI-style JSON API (<base><name>/json) micropip installs from",
		Value: text(func(c *Config) *string { return &c.PipIndex }), Rule: whenPip(func(c *Config) error {
			if u, err := url.Parse(c.PipIndex); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("%q is not an http(s) URL", c.PipIndex)
			}
			return nil
		})},
	{Env: "SANDBOX_PIP_ALLOW", Def: "*", Help: "project names micropip may install, or * for any",
		Value: list(func(c *Config) *[]string { return &c.PipAllow }), Rule: whenPip(func(c *Config) error {
			for _, n := range c.PipAllow {
				if n != "*" && !pkgs.ValidName(n) {
					return fmt.Errorf("%q is not a project name or *", n)
				}
			}
			return nil
		})},
	{Env: "SANDBOX_PIP_HOSTS", Def: "files.pythonhosted.org", Help: "hosts wheels may be downloaded from besides the index's",
		Value: list(func(c *Config) *[]string { return &c.PipHosts }), Rule: whenPip(hosts(func(c *Config) []string { return c.PipHosts }))},
	{Env: "SANDBOX_PRELOAD", Help: "modules every new interpreter imports before the base snapshot",
		Value: list(func(c *Config) *[]string { return &c.Preload }), Rule: func(c *Config) error {
			if err := CheckPreload(c.Preload); err != nil {
				return errors.New(strings.TrimSuffix(sandchat.ErrorMessage(err), "."))
			}
			return nil
		}},
	{Env: "SANDBOX_ISOLATION", Def: IsolationStrict, Help: "strict: each session process under bubblewrap in its own cgroup; process: Deno permissions only, where namespaces or cgroups are unavailable",
		Value: sandchat.OneOf(func(c *Config) *string { return &c.Isolation }, IsolationStrict, IsolationProcess)},
	{Env: "SANDBOX_USER", Def: "nobody", Help: "unprivileged user session processes run as when the server runs as root",
		Value: text(func(c *Config) *string { return &c.SandboxUser }), Rule: func(c *Config) error {
			if strings.TrimSpace(c.SandboxUser) == "" {
				return errors.New("must name a user")
			}
			return nil
		}},
	{Env: "SANDBOX_CGROUPS", Def: proc.CgroupsAuto, Help: "auto: each strict session process in a cgroup of its own where the server can write one, else bounded by rlimits, a uid of its own, nice and oom_score_adj (doctor names each); required: refuse to start without; off: never write cgroups",
		Value: sandchat.OneOf(func(c *Config) *string { return &c.Cgroups }, proc.CgroupsAuto, proc.CgroupsRequired, proc.CgroupsOff)},
	{Env: "SANDBOX_FIRST_UID", Def: "60000", Help: "first of the uids session processes run as where they have no cgroup (one per process: MAX_PROCESSES of them and 16 more); nothing else may use them",
		Value: count(func(c *Config) *int { return &c.FirstUID }, 1000, 1<<31-1-extraUIDs-4096)},
	{Env: "SANDBOX_MEMORY_MERGE", Def: "false", Help: "let the kernel's KSM merge identical pages of session processes (Linux 6.4+, KSM running): more sessions per GiB for some CPU",
		Value: boolean(func(c *Config) *bool { return &c.MemoryMerge })},
	{Env: "SANDBOX_FORCE_REPLAY", Def: "false", Help: "persist every session as packages + replay of its cells",
		Value: boolean(func(c *Config) *bool { return &c.ForceReplay })},

	{Env: "SANDBOX_WARM_POOL", Def: "2", Help: "session processes kept restored and ready for new conversations, at least",
		Value: count(func(c *Config) *int { return &c.WarmPool }, 0, 64)},
	{Env: "SANDBOX_WARM_POOL_MAX", Def: "8", Help: "the most the warm pool grows to when bursts of new conversations come",
		Value: count(func(c *Config) *int { return &c.WarmPoolMax }, 0, 64), Rule: func(c *Config) error {
			if c.WarmPoolMax < c.WarmPool {
				return fmt.Errorf("%d is below SANDCHAT_SANDBOX_WARM_POOL (%d)", c.WarmPoolMax, c.WarmPool)
			}
			return nil
		}},
	{Env: "SANDBOX_WARM_SPARES", Def: "1", Help: "primed processes kept for restoring saved sessions fast; each costs one extra restore to warm up",
		Value: count(func(c *Config) *int { return &c.WarmSpares }, 0, 8)},
	{Env: "SANDBOX_MAX_LIVE", Def: "16", Help: "live session processes per node",
		Value: count(func(c *Config) *int { return &c.MaxLive }, 1, 4096)},
	{Env: "SANDBOX_MAX_PROCESSES", Def: "0", Help: "session processes per node, starting, live and pooled together (0: one per 512 MiB of the memory the server may use, its cgroup's limit where lower than the host's, 2 to 256); runs past it wait while idle sessions are evicted",
		Value: count(func(c *Config) *int { return &c.MaxProcesses }, 0, 4096), Rule: func(c *Config) error {
			if c.MaxProcesses == 1 {
				return errors.New("1 is too few: 0 (sized by memory) or at least 2")
			}
			return nil
		}},
	{Env: "SANDBOX_MAX_STARTING", Def: "0", Help: "session processes starting or restoring at once (0: one per CPU the server may use, its cgroup's quota where lower)",
		Value: count(func(c *Config) *int { return &c.MaxStarting }, 0, 256)},
	{Env: "SANDBOX_ADMIT_QUEUE", Def: "256", Help: "runs that may wait for a session process on a node; past it, 429",
		Value: count(func(c *Config) *int { return &c.AdmitQueue }, 0, 100000)},
	{Env: "SANDBOX_MAX_ARTIFACTS", Def: "20", Help: "files returned per run",
		Value: count(func(c *Config) *int { return &c.MaxArtifacts }, 0, 10000)},
	{Env: "SANDBOX_MAX_DISPLAYS", Def: "50", Help: "display items (display(), rich results, figures) per run",
		Value: count(func(c *Config) *int { return &c.MaxDisplays }, 0, 1000)},
	{Env: "SANDBOX_QUEUE_DEPTH", Def: "8", Help: "runs that may wait for one session before 429",
		Value: count(func(c *Config) *int { return &c.QueueDepth }, 0, 1000)},
	{Env: "SANDBOX_PIP_MAX_PACKAGES", Def: "20", Help: "wheels one micropip.install may fetch, dependencies included",
		Value: count(func(c *Config) *int { return &c.PipMaxPackages }, 1, 500)},
	{Env: "SANDBOX_PIP_MAX_INDEX_REQUESTS", Def: "40", Help: "package index documents one micropip.install may ask for",
		Value: count(func(c *Config) *int { return &c.PipMaxIndexRequests }, 1, 2000)},
	{Env: "SANDBOX_PACKAGE_CACHE_MAX_FILES", Def: "10000", Help: "files the package cache may hold; a fetch past it while loads hold the rest is refused",
		Value: count(func(c *Config) *int { return &c.PackageCacheMaxFiles }, 1, 10_000_000)},
	{Env: "SANDBOX_PACKAGE_RUN_MAX_FILES", Def: "64", Help: "package files (wheels) one run may load",
		Value: count(func(c *Config) *int { return &c.PackageRunMaxFiles }, 1, 100_000)},
	{Env: "SANDBOX_PACKAGE_RUN_MAX_FETCHES", Def: "64", Help: "downloads (wheels, index documents) one run may cause",
		Value: count(func(c *Config) *int { return &c.PackageRunMaxFetches }, 0, 100_000)},
	{Env: "SANDBOX_PACKAGE_SESSION_MAX_FILES", Def: "256", Help: "package files one session process may load over its life",
		Value: count(func(c *Config) *int { return &c.PackageSessionMaxFiles }, 1, 100_000)},
	{Env: "SANDBOX_PACKAGE_SESSION_MAX_FETCHES", Def: "256", Help: "downloads one session process may cause over its life",
		Value: count(func(c *Config) *int { return &c.PackageSessionMaxFetches }, 0, 100_000)},

	{Env: "SANDBOX_MEMORY", Def: "512MiB", Help: "WebAssembly memory per session (past it Python gets MemoryError)",
		Value: bytes64(func(c *Config) *int64 { return &c.MemoryBytes }, 64<<20, 4<<30)},
	{Env: "SANDBOX_RUNTIME_OVERHEAD", Def: "384MiB", Help: "memory a session process needs beside the heap; the kernel caps it at MEMORY plus this",
		Value: bytes64(func(c *Config) *int64 { return &c.RuntimeOverheadBytes }, 128<<20, 8<<30)},
	{Env: "SANDBOX_MAX_STATE", Def: "64MiB", Help: "a session's durable state (heap delta, files, replay log), Redis and Postgres together",
		Value: bytes64(func(c *Config) *int64 { return &c.MaxStateBytes }, 1<<20, 4<<30)},
	{Env: "SANDBOX_HOT_STATE", Def: "16MiB", Help: "what one session keeps in Redis; its heap and larger files live in Postgres",
		Value: bytes64(func(c *Config) *int64 { return &c.HotStateBytes }, 1<<20, 4<<30)},
	{Env: "SANDBOX_MAX_OUTPUT", Def: "1MiB", Help: "stdout and stderr kept per run, each",
		Value: bytesInt(func(c *Config) *int { return &c.MaxOutput }, 1<<10, 1<<30)},
	{Env: "SANDBOX_MAX_CODE", Def: "256KiB", Help: "code per run",
		Value: bytesInt(func(c *Config) *int { return &c.MaxCode }, 1<<10, 64<<20)},
	{Env: "SANDBOX_MAX_ARTIFACT_BYTES", Def: "10MiB", Help: "size of one returned file",
		Value: bytes64(func(c *Config) *int64 { return &c.MaxArtifactBytes }, 0, 4<<30)},
	{Env: "SANDBOX_MAX_DATA_BYTES", Def: "64MiB", Help: "conversation files mounted under /data per run",
		Value: bytes64(func(c *Config) *int64 { return &c.MaxDataBytes }, 0, 4<<30)},
	{Env: "SANDBOX_MAX_DISPLAY_BYTES", Def: "16MiB", Help: "display items per run (images count as base64)",
		Value: bytes64(func(c *Config) *int64 { return &c.MaxDisplayBytes }, 0, 256<<20)},
	{Env: "SANDBOX_PACKAGE_CACHE_MAX", Def: "2GiB", Help: "package cache size; least recently used wheels go past it, and a fetch past it while loads hold the rest is refused",
		Value: bytes64(func(c *Config) *int64 { return &c.PackageCacheMaxBytes }, 16<<20, tib)},
	{Env: "SANDBOX_PACKAGE_RUN_MAX", Def: "512MiB", Help: "bytes of packages one run may load",
		Value: bytes64(func(c *Config) *int64 { return &c.PackageRunMaxBytes }, 1<<20, tib)},
	{Env: "SANDBOX_PACKAGE_SESSION_MAX", Def: "1GiB", Help: "bytes of packages one session process may load over its life",
		Value: bytes64(func(c *Config) *int64 { return &c.PackageSessionMaxBytes }, 1<<20, tib)},
	{Env: "SANDBOX_PIP_MAX_BYTES", Def: "100MiB", Help: "bytes one micropip.install may download",
		Value: bytes64(func(c *Config) *int64 { return &c.PipMaxBytes }, 1<<20, pkgs.MaxWheelBytes)},

	{Env: "SANDBOX_TIMEOUT", Def: "30s", Help: "default time limit of a run",
		Value: duration(func(c *Config) *time.Duration { return &c.Timeout }, 10*time.Millisecond, 24*time.Hour)},
	{Env: "SANDBOX_MAX_TIMEOUT", Def: "300s", Help: "the longest time limit a caller may ask for",
		Value: duration(func(c *Config) *time.Duration { return &c.MaxTimeout }, 10*time.Millisecond, 24*time.Hour), Rule: func(c *Config) error {
			if c.MaxTimeout < c.Timeout {
				return fmt.Errorf("%s is below SANDCHAT_SANDBOX_TIMEOUT (%s)", c.MaxTimeout, c.Timeout)
			}
			return nil
		}},
	{Env: "SANDBOX_GRACE", Def: "3s", Help: "how long code may ignore the interrupt before its process is killed",
		Value: duration(func(c *Config) *time.Duration { return &c.Grace }, 100*time.Millisecond, time.Minute)},
	{Env: "SANDBOX_LEASE_TTL", Def: state.LeaseTTL.String(), Help: "how long a session's lease outlives its server's last renewal: another server takes a dead one's sessions after it, and a server that stood still longer loses the runs it held",
		Value: duration(func(c *Config) *time.Duration { return &c.LeaseTTL }, time.Second, 5*time.Minute)},
	{Env: "SANDBOX_RESTORE_TIMEOUT", Def: "2m", Help: "how long bringing a session back may take (restore, packages, replay)",
		Value: duration(func(c *Config) *time.Duration { return &c.RestoreTimeout }, time.Second, 30*time.Minute)},
	{Env: "SANDBOX_ADMIT_TIMEOUT", Def: "30s", Help: "the longest a run waits for a session process before a 429",
		Value: duration(func(c *Config) *time.Duration { return &c.AdmitTimeout }, 100*time.Millisecond, 10*time.Minute)},
	{Env: "SANDBOX_CHECKPOINT_DELAY", Def: "2s", Help: "how long after a session's last run its heap is saved; runs are durable before that by the session's log",
		Value: duration(func(c *Config) *time.Duration { return &c.CheckpointDelay }, 0, 24*time.Hour)},
	{Env: "SANDBOX_IDLE_TIMEOUT", Def: "10m", Help: "a session idle this long leaves memory (its state stays in Redis)",
		Value: duration(func(c *Config) *time.Duration { return &c.IdleTimeout }, time.Second, year)},
	{Env: "SANDBOX_SESSION_TTL", Def: "24h", Help: "how long an idle session's state is kept",
		Value: duration(func(c *Config) *time.Duration { return &c.SessionTTL }, time.Minute, 100*year)},
}
