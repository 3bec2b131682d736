package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandchat/sandchat/sandbox"
)

// SandboxConfig is the Python sandbox part of Config.
type SandboxConfig struct {
	Enabled bool
	// Default is on or off: the Python sandbox's state in conversations where neither
	// the conversation nor its agent sets it.
	Default          string
	PerAgentSessions bool
	// Pip is on or off: whether micropip.install may fetch wheels through the server.
	Pip    string
	Engine sandbox.Config
}

// defaultEngine is the engine configuration before any setting applies; fields no
// setting names keep these values.
func defaultEngine() sandbox.Config { return sandbox.DefaultConfig() }

// engine is the field of Config a sandbox setting fills.
func engine(c *Config) *sandbox.Config { return &c.Sandbox.Engine }

// sandboxSettings are the SANDCHAT_SANDBOX_* settings; their defaults are the engine's.
// Sizes are in bytes and accept KiB/MiB/GiB suffixes; durations take Go's form (30s, 24h).
var sandboxSettings = func() []setting {
	def := defaultEngine()
	itoa, sz, dur := strconv.Itoa, func(n int64) string { return strconv.FormatInt(n, 10) }, time.Duration.String
	return []setting{
		{env: "SANDBOX_ENABLED", flag: "sandbox", def: "true", help: "run the Python sandbox engine",
			into: boolean(func(c *Config) *bool { return &c.Sandbox.Enabled })},
		{env: "SANDBOX_DEFAULT", def: "off", help: "the Python sandbox's state where neither the conversation nor its agent sets it: off (users switch it on from the chat toolbar) or on",
			into: text(func(c *Config) *string { return &c.Sandbox.Default }), check: func(c *Config) error { return oneOf(c.Sandbox.Default, "on", "off") }},
		{env: "SANDBOX_PER_AGENT_SESSIONS", def: "false", help: "give each agent of a swarm its own Python session instead of the conversation's",
			into: boolean(func(c *Config) *bool { return &c.Sandbox.PerAgentSessions })},
		{env: "SANDBOX_DENO", help: "Deno binary; default: sandbox/runtime/node_modules",
			into: text(func(c *Config) *string { return &engine(c).DenoPath })},
		{env: "SANDBOX_RUNTIME_DIR", help: "directory with host.ts and worker/ (the session process runtime); default: found near the binary or working directory",
			into: text(func(c *Config) *string { return &engine(c).RuntimeDir })},
		{env: "SANDBOX_PYODIDE_DIR", help: "Pyodide distribution; default: the runtime's node_modules/pyodide",
			into: text(func(c *Config) *string { return &engine(c).PyodideDir })},
		{env: "SANDBOX_PACKAGE_DIR", help: "mirror of the Pyodide distribution (pyodide-lock.json + wheels) imports are loaded from",
			into: text(func(c *Config) *string { return &engine(c).PackageDir })},
		{env: "SANDBOX_PACKAGE_CDN", def: def.PackageCDN, help: "where the server fetches wheels missing from the package dir, sha256-verified against the lock: official (the pinned Pyodide's own distribution), off, or the base URL of a mirror",
			into: text(func(c *Config) *string { return &engine(c).PackageCDN })},
		{env: "SANDBOX_PACKAGE_CACHE_DIR", help: "where wheels fetched from the CDN are kept, shared by all sessions; default <tmp>/sandchat-packages",
			into: text(func(c *Config) *string { return &engine(c).PackageCacheDir })},
		{env: "SANDBOX_NETWORK_ALLOW", help: "hosts (host or host:port) Python may reach; empty: no network",
			into: commaList(func(c *Config) *[]string { return &engine(c).NetworkAllow })},
		{env: "SANDBOX_PIP", def: "on", help: "on: micropip.install fetches pure-Python wheels through the server; off: no installs",
			into: text(func(c *Config) *string { return &c.Sandbox.Pip }), check: func(c *Config) error { return oneOf(c.Sandbox.Pip, "on", "off") }},
		{env: "SANDBOX_PIP_INDEX", def: def.PipIndex, help: "base URL of a PyPI-style JSON API (<base><name>/json) micropip installs from",
			into: text(func(c *Config) *string { return &engine(c).PipIndex })},
		{env: "SANDBOX_PIP_ALLOW", def: strings.Join(def.PipAllow, ","), help: "project names micropip may install, or * for any",
			into: commaList(func(c *Config) *[]string { return &engine(c).PipAllow })},
		{env: "SANDBOX_PIP_HOSTS", def: strings.Join(def.PipHosts, ","), help: "hosts wheels may be downloaded from besides the index's",
			into: commaList(func(c *Config) *[]string { return &engine(c).PipHosts })},
		{env: "SANDBOX_PRELOAD", help: "modules every new interpreter imports before the base snapshot",
			into: commaList(func(c *Config) *[]string { return &engine(c).Preload })},
		{env: "SANDBOX_ISOLATION", def: def.Isolation, help: "strict: each session process under bubblewrap in its own cgroup; process: Deno permissions only, where namespaces or cgroups are unavailable",
			into: text(func(c *Config) *string { return &engine(c).Isolation })},
		{env: "SANDBOX_USER", def: def.SandboxUser, help: "unprivileged user session processes run as when the server runs as root",
			into: text(func(c *Config) *string { return &engine(c).SandboxUser })},
		{env: "SANDBOX_CGROUPS", def: def.Cgroups, help: "auto: each strict session process in a cgroup of its own where the server can write one, else bounded by rlimits, a uid of its own, nice and oom_score_adj (doctor names each); required: refuse to start without; off: never write cgroups",
			into: text(func(c *Config) *string { return &engine(c).Cgroups })},
		{env: "SANDBOX_FIRST_UID", def: itoa(def.FirstUID), help: "first of the uids session processes run as where they have no cgroup (one per process: MAX_PROCESSES of them and 16 more); nothing else may use them",
			into: wholeNumber(func(c *Config) *int { return &engine(c).FirstUID })},
		{env: "SANDBOX_MEMORY_MERGE", def: "false", help: "let the kernel's KSM merge identical pages of session processes (Linux 6.4+, KSM running): more sessions per GiB for some CPU",
			into: boolean(func(c *Config) *bool { return &engine(c).MemoryMerge })},
		{env: "SANDBOX_FORCE_REPLAY", def: "false", help: "persist every session as packages + replay of its cells",
			into: boolean(func(c *Config) *bool { return &engine(c).ForceReplay })},

		{env: "SANDBOX_WARM_POOL", def: itoa(def.WarmPool), help: "session processes kept restored and ready for new conversations, at least",
			into: wholeNumber(func(c *Config) *int { return &engine(c).WarmPool })},
		{env: "SANDBOX_WARM_POOL_MAX", def: itoa(def.WarmPoolMax), help: "the most the warm pool grows to when bursts of new conversations come",
			into: wholeNumber(func(c *Config) *int { return &engine(c).WarmPoolMax })},
		{env: "SANDBOX_WARM_SPARES", def: itoa(def.WarmSpares), help: "primed processes kept for restoring saved sessions fast; each costs one extra restore to warm up",
			into: wholeNumber(func(c *Config) *int { return &engine(c).WarmSpares })},
		{env: "SANDBOX_MAX_LIVE", def: itoa(def.MaxLive), help: "live session processes per node",
			into: wholeNumber(func(c *Config) *int { return &engine(c).MaxLive })},
		{env: "SANDBOX_MAX_PROCESSES", def: "0", help: "session processes per node, starting, live and pooled together (0: one per 512 MiB of the memory the server may use, its cgroup's limit where lower than the host's, 2 to 256); runs past it wait while idle sessions are evicted",
			into: wholeNumber(func(c *Config) *int { return &engine(c).MaxProcesses })},
		{env: "SANDBOX_MAX_STARTING", def: "0", help: "session processes starting or restoring at once (0: one per CPU the server may use, its cgroup's quota where lower)",
			into: wholeNumber(func(c *Config) *int { return &engine(c).MaxStarting })},
		{env: "SANDBOX_ADMIT_QUEUE", def: itoa(def.AdmitQueue), help: "runs that may wait for a session process on a node; past it, 429",
			into: wholeNumber(func(c *Config) *int { return &engine(c).AdmitQueue })},
		{env: "SANDBOX_MAX_ARTIFACTS", def: itoa(def.MaxArtifacts), help: "files returned per run",
			into: wholeNumber(func(c *Config) *int { return &engine(c).MaxArtifacts })},
		{env: "SANDBOX_MAX_DISPLAYS", def: itoa(def.MaxDisplays), help: "display items (display(), rich results, figures) per run",
			into: wholeNumber(func(c *Config) *int { return &engine(c).MaxDisplays })},
		{env: "SANDBOX_QUEUE_DEPTH", def: itoa(def.QueueDepth), help: "runs that may wait for one session before 429",
			into: wholeNumber(func(c *Config) *int { return &engine(c).QueueDepth })},
		{env: "SANDBOX_PIP_MAX_PACKAGES", def: itoa(def.PipMaxPackages), help: "wheels one micropip.install may fetch, dependencies included",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PipMaxPackages })},
		{env: "SANDBOX_PIP_MAX_INDEX_REQUESTS", def: itoa(def.PipMaxIndexRequests), help: "package index documents one micropip.install may ask for",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PipMaxIndexRequests })},
		{env: "SANDBOX_PACKAGE_CACHE_MAX_FILES", def: itoa(def.PackageCacheMaxFiles), help: "files the package cache may hold; a fetch past it while loads hold the rest is refused",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PackageCacheMaxFiles })},
		{env: "SANDBOX_PACKAGE_RUN_MAX_FILES", def: itoa(def.PackageRunMaxFiles), help: "package files (wheels) one run may load",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PackageRunMaxFiles })},
		{env: "SANDBOX_PACKAGE_RUN_MAX_FETCHES", def: itoa(def.PackageRunMaxFetches), help: "downloads (wheels, index documents) one run may cause",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PackageRunMaxFetches })},
		{env: "SANDBOX_PACKAGE_SESSION_MAX_FILES", def: itoa(def.PackageSessionMaxFiles), help: "package files one session process may load over its life",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PackageSessionMaxFiles })},
		{env: "SANDBOX_PACKAGE_SESSION_MAX_FETCHES", def: itoa(def.PackageSessionMaxFetches), help: "downloads one session process may cause over its life",
			into: wholeNumber(func(c *Config) *int { return &engine(c).PackageSessionMaxFetches })},

		{env: "SANDBOX_MEMORY", def: sz(def.MemoryBytes), help: "WebAssembly memory per session (past it Python gets MemoryError)",
			into: size(func(c *Config) *int64 { return &engine(c).MemoryBytes })},
		{env: "SANDBOX_RUNTIME_OVERHEAD", def: sz(def.RuntimeOverheadBytes), help: "memory a session process needs beside the heap; the kernel caps it at MEMORY plus this",
			into: size(func(c *Config) *int64 { return &engine(c).RuntimeOverheadBytes })},
		{env: "SANDBOX_MAX_STATE", def: sz(def.MaxStateBytes), help: "a session's durable state (heap delta, files, replay log), Redis and Postgres together",
			into: size(func(c *Config) *int64 { return &engine(c).MaxStateBytes })},
		{env: "SANDBOX_HOT_STATE", def: sz(def.HotStateBytes), help: "what one session keeps in Redis; its heap and larger files live in Postgres",
			into: size(func(c *Config) *int64 { return &engine(c).HotStateBytes })},
		{env: "SANDBOX_MAX_OUTPUT", def: itoa(def.MaxOutput), help: "stdout and stderr kept per run, each",
			into: size(func(c *Config) *int { return &engine(c).MaxOutput })},
		{env: "SANDBOX_MAX_CODE", def: itoa(def.MaxCode), help: "code per run",
			into: size(func(c *Config) *int { return &engine(c).MaxCode })},
		{env: "SANDBOX_MAX_ARTIFACT_BYTES", def: sz(def.MaxArtifactBytes), help: "size of one returned file",
			into: size(func(c *Config) *int64 { return &engine(c).MaxArtifactBytes })},
		{env: "SANDBOX_MAX_DATA_BYTES", def: sz(def.MaxDataBytes), help: "conversation files mounted under /data per run",
			into: size(func(c *Config) *int64 { return &engine(c).MaxDataBytes })},
		{env: "SANDBOX_MAX_DISPLAY_BYTES", def: sz(def.MaxDisplayBytes), help: "display items per run (images count as base64)",
			into: size(func(c *Config) *int64 { return &engine(c).MaxDisplayBytes })},
		{env: "SANDBOX_PACKAGE_CACHE_MAX", def: sz(def.PackageCacheMaxBytes), help: "package cache size; least recently used wheels go past it, and a fetch past it while loads hold the rest is refused",
			into: size(func(c *Config) *int64 { return &engine(c).PackageCacheMaxBytes })},
		{env: "SANDBOX_PACKAGE_RUN_MAX", def: sz(def.PackageRunMaxBytes), help: "bytes of packages one run may load",
			into: size(func(c *Config) *int64 { return &engine(c).PackageRunMaxBytes })},
		{env: "SANDBOX_PACKAGE_SESSION_MAX", def: sz(def.PackageSessionMaxBytes), help: "bytes of packages one session process may load over its life",
			into: size(func(c *Config) *int64 { return &engine(c).PackageSessionMaxBytes })},
		{env: "SANDBOX_PIP_MAX_BYTES", def: sz(def.PipMaxBytes), help: "bytes one micropip.install may download",
			into: size(func(c *Config) *int64 { return &engine(c).PipMaxBytes })},

		{env: "SANDBOX_TIMEOUT", def: dur(def.Timeout), help: "default time limit of a run",
			into: duration(func(c *Config) *time.Duration { return &engine(c).Timeout })},
		{env: "SANDBOX_MAX_TIMEOUT", def: dur(def.MaxTimeout), help: "the longest time limit a caller may ask for",
			into: duration(func(c *Config) *time.Duration { return &engine(c).MaxTimeout })},
		{env: "SANDBOX_GRACE", def: dur(def.Grace), help: "how long code may ignore the interrupt before its process is killed",
			into: duration(func(c *Config) *time.Duration { return &engine(c).Grace })},
		{env: "SANDBOX_LEASE_TTL", def: dur(def.LeaseTTL), help: "how long a session's lease outlives its server's last renewal: another server takes a dead one's sessions after it, and a server that stood still longer loses the runs it held",
			into: duration(func(c *Config) *time.Duration { return &engine(c).LeaseTTL })},
		{env: "SANDBOX_RESTORE_TIMEOUT", def: dur(def.RestoreTimeout), help: "how long bringing a session back may take (restore, packages, replay)",
			into: duration(func(c *Config) *time.Duration { return &engine(c).RestoreTimeout })},
		{env: "SANDBOX_ADMIT_TIMEOUT", def: dur(def.AdmitTimeout), help: "the longest a run waits for a session process before a 429",
			into: duration(func(c *Config) *time.Duration { return &engine(c).AdmitTimeout })},
		{env: "SANDBOX_CHECKPOINT_DELAY", def: dur(def.CheckpointDelay), help: "how long after a session's last run its heap is saved; runs are durable before that by the session's log",
			into: duration(func(c *Config) *time.Duration { return &engine(c).CheckpointDelay })},
		{env: "SANDBOX_IDLE_TIMEOUT", def: dur(def.IdleTimeout), help: "a session idle this long leaves memory (its state stays in Redis)",
			into: duration(func(c *Config) *time.Duration { return &engine(c).IdleTimeout })},
		{env: "SANDBOX_SESSION_TTL", def: dur(def.SessionTTL), help: "how long an idle session's state is kept",
			into: duration(func(c *Config) *time.Duration { return &engine(c).SessionTTL })},
	}
}()

// finish checks the engine settings together, once every one is parsed.
func (c *SandboxConfig) finish(redisPrefix string) error {
	c.Engine.RedisPrefix = redisPrefix
	c.Engine.PipOff = c.Pip == "off"
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// parseSize reads "1048576", "512MiB", "64KiB" or "2GiB".
func parseSize(raw string) (int64, error) {
	s := strings.TrimSpace(raw)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", raw)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", raw)
	}
	return n * mult, nil
}
