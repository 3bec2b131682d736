package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandchat/sandchat/sandbox"
)

// SandboxConfig is the Python sandbox part of Config.
type SandboxConfig struct {
	Enabled          bool
	PerAgentSessions bool
	Engine           sandbox.Config
}

// bindSandbox registers the SANDCHAT_SANDBOX_* settings. Sizes are in bytes and accept
// KiB/MiB/GiB suffixes; durations take Go's form (30s, 24h).
func (c *SandboxConfig) bind(fs *flag.FlagSet, redisPrefix *string) (finish func() error) {
	def := sandbox.DefaultConfig()
	e := &c.Engine
	*e = def
	fs.BoolVar(&c.Enabled, "sandbox", envBool("SANDBOX_ENABLED", true), "run the Python sandbox engine (SANDCHAT_SANDBOX_ENABLED)")
	fs.BoolVar(&c.PerAgentSessions, "sandbox-per-agent-sessions", envBool("SANDBOX_PER_AGENT_SESSIONS", false), "give each agent of a swarm its own Python session instead of the conversation's (SANDCHAT_SANDBOX_PER_AGENT_SESSIONS)")
	fs.StringVar(&e.DenoPath, "sandbox-deno", env("SANDBOX_DENO", ""), "Deno binary; default: sandbox/runtime/node_modules (SANDCHAT_SANDBOX_DENO)")
	fs.StringVar(&e.RuntimeDir, "sandbox-runtime-dir", env("SANDBOX_RUNTIME_DIR", ""), "directory with host.ts and worker.ts; default: found near the binary or working directory (SANDCHAT_SANDBOX_RUNTIME_DIR)")
	fs.StringVar(&e.PyodideDir, "sandbox-pyodide-dir", env("SANDBOX_PYODIDE_DIR", ""), "Pyodide distribution; default: the runtime's node_modules/pyodide (SANDCHAT_SANDBOX_PYODIDE_DIR)")
	fs.StringVar(&e.PackageDir, "sandbox-package-dir", env("SANDBOX_PACKAGE_DIR", ""), "mirror of the Pyodide distribution (pyodide-lock.json + wheels) imports are loaded from (SANDCHAT_SANDBOX_PACKAGE_DIR)")
	fs.StringVar(&e.PackageCDN, "sandbox-package-cdn", env("SANDBOX_PACKAGE_CDN", ""), "base URL of the Pyodide distribution; the server fetches wheels missing from the package dir, sha256-verified (SANDCHAT_SANDBOX_PACKAGE_CDN)")
	fs.StringVar(&e.PackageCacheDir, "sandbox-package-cache-dir", env("SANDBOX_PACKAGE_CACHE_DIR", ""), "where wheels fetched from the CDN are kept, shared by all sessions; default <tmp>/sandchat-packages (SANDCHAT_SANDBOX_PACKAGE_CACHE_DIR)")
	allow := list{}
	_ = allow.Set(env("SANDBOX_NETWORK_ALLOW", ""))
	fs.Var(&allow, "sandbox-network-allow", "hosts (host or host:port) Python may reach; empty: no network (SANDCHAT_SANDBOX_NETWORK_ALLOW)")
	// Packages: micropip.install served by the engine, the cache bound, preloaded modules.
	pipMode := env("SANDBOX_PIP", "on")
	fs.StringVar(&pipMode, "sandbox-pip", pipMode, "on: micropip.install fetches pure-Python wheels through the server; off: no installs (SANDCHAT_SANDBOX_PIP)")
	fs.StringVar(&e.PipIndex, "sandbox-pip-index", env("SANDBOX_PIP_INDEX", e.PipIndex), "base URL of a PyPI-style JSON API (<base><name>/json) micropip installs from (SANDCHAT_SANDBOX_PIP_INDEX)")
	pipAllow, pipHosts, preload := list(e.PipAllow), list(e.PipHosts), list{}
	_ = pipAllow.Set(env("SANDBOX_PIP_ALLOW", pipAllow.String()))
	_ = pipHosts.Set(env("SANDBOX_PIP_HOSTS", pipHosts.String()))
	_ = preload.Set(env("SANDBOX_PRELOAD", ""))
	fs.Var(&pipAllow, "sandbox-pip-allow", "project names micropip may install, or * for any (SANDCHAT_SANDBOX_PIP_ALLOW)")
	fs.Var(&pipHosts, "sandbox-pip-hosts", "hosts wheels may be downloaded from besides the index's (SANDCHAT_SANDBOX_PIP_HOSTS)")
	fs.Var(&preload, "sandbox-preload", "modules every new interpreter imports before the base snapshot (SANDCHAT_SANDBOX_PRELOAD)")
	fs.StringVar(&e.Isolation, "sandbox-isolation", env("SANDBOX_ISOLATION", e.Isolation), "strict: each session process under bubblewrap in its own cgroup; process: Deno permissions only, where namespaces or cgroups are unavailable (SANDCHAT_SANDBOX_ISOLATION)")
	fs.StringVar(&e.SandboxUser, "sandbox-user", env("SANDBOX_USER", e.SandboxUser), "unprivileged user session processes run as when the server runs as root (SANDCHAT_SANDBOX_USER)")
	fs.BoolVar(&e.ForceReplay, "sandbox-force-replay", envBool("SANDBOX_FORCE_REPLAY", false), "persist every session as packages + replay of its cells (SANDCHAT_SANDBOX_FORCE_REPLAY)")

	ints := []struct {
		name, help string
		dst        *int
	}{
		{"WARM_POOL", "session processes kept restored and ready for new conversations, at least", &e.WarmPool},
		{"WARM_POOL_MAX", "the most the warm pool grows to when bursts of new conversations come", &e.WarmPoolMax},
		{"MAX_LIVE", "live session processes per node", &e.MaxLive},
		{"MAX_ARTIFACTS", "files returned per run", &e.MaxArtifacts},
		{"MAX_DISPLAYS", "display items (display(), rich results, figures) per run", &e.MaxDisplays},
		{"QUEUE_DEPTH", "runs that may wait for one session before 429", &e.QueueDepth},
		{"PIP_MAX_PACKAGES", "wheels one micropip.install may fetch, dependencies included", &e.PipMaxPackages},
	}
	intRaw := make([]string, len(ints))
	for i, v := range ints {
		intRaw[i] = env("SANDBOX_"+v.name, strconv.Itoa(*v.dst))
		fs.StringVar(&intRaw[i], "sandbox-"+flagName(v.name), intRaw[i], fmt.Sprintf("%s (SANDCHAT_SANDBOX_%s)", v.help, v.name))
	}
	maxOutput, maxCode := int64(e.MaxOutput), int64(e.MaxCode)
	sizes := []struct {
		name, help string
		dst        *int64
	}{
		{"MEMORY", "WebAssembly memory per session (past it Python gets MemoryError)", &e.MemoryBytes},
		{"RUNTIME_OVERHEAD", "memory a session process needs beside the heap; the kernel caps it at MEMORY plus this", &e.RuntimeOverheadBytes},
		{"MAX_STATE", "a session's durable state in Redis (heap delta, files, replay log)", &e.MaxStateBytes},
		{"MAX_OUTPUT", "stdout and stderr kept per run, each", &maxOutput},
		{"MAX_CODE", "code per run", &maxCode},
		{"MAX_ARTIFACT_BYTES", "size of one returned file", &e.MaxArtifactBytes},
		{"MAX_DATA_BYTES", "conversation files mounted under /data per run", &e.MaxDataBytes},
		{"MAX_DISPLAY_BYTES", "display items per run (images count as base64)", &e.MaxDisplayBytes},
		{"PACKAGE_CACHE_MAX", "package cache size; least recently used wheels go past it", &e.PackageCacheMaxBytes},
		{"PIP_MAX_BYTES", "bytes one micropip.install may download", &e.PipMaxBytes},
	}
	sizeRaw := make([]string, len(sizes))
	for i, v := range sizes {
		sizeRaw[i] = env("SANDBOX_"+v.name, strconv.FormatInt(*v.dst, 10))
		fs.StringVar(&sizeRaw[i], "sandbox-"+flagName(v.name), sizeRaw[i], fmt.Sprintf("%s, bytes or 512MiB (SANDCHAT_SANDBOX_%s)", v.help, v.name))
	}
	durations := []struct {
		name, help string
		dst        *time.Duration
	}{
		{"TIMEOUT", "default time limit of a run", &e.Timeout},
		{"MAX_TIMEOUT", "the longest time limit a caller may ask for", &e.MaxTimeout},
		{"GRACE", "how long code may ignore the interrupt before its process is killed", &e.Grace},
		{"RESTORE_TIMEOUT", "how long bringing a session back may take (restore, packages, replay)", &e.RestoreTimeout},
		{"IDLE_TIMEOUT", "a session idle this long leaves memory (its state stays in Redis)", &e.IdleTimeout},
		{"SESSION_TTL", "how long an idle session's state is kept", &e.SessionTTL},
	}
	durRaw := make([]string, len(durations))
	for i, v := range durations {
		durRaw[i] = env("SANDBOX_"+v.name, v.dst.String())
		fs.StringVar(&durRaw[i], "sandbox-"+flagName(v.name), durRaw[i], fmt.Sprintf("%s (SANDCHAT_SANDBOX_%s)", v.help, v.name))
	}
	return func() error {
		for _, name := range []string{"SANDBOX_ENABLED", "SANDBOX_PER_AGENT_SESSIONS", "SANDBOX_FORCE_REPLAY"} {
			if v := env(name, ""); v != "" {
				if _, err := strconv.ParseBool(v); err != nil {
					return fmt.Errorf("SANDCHAT_%s: %q is not true or false", name, v)
				}
			}
		}
		e.NetworkAllow = allow
		if pipMode != "on" && pipMode != "off" {
			return fmt.Errorf("SANDCHAT_SANDBOX_PIP: %q is not on or off", pipMode)
		}
		e.PipOff, e.PipAllow, e.PipHosts, e.Preload = pipMode == "off", pipAllow, pipHosts, preload
		e.RedisPrefix = *redisPrefix
		for i, v := range ints {
			n, err := strconv.Atoi(strings.TrimSpace(intRaw[i]))
			if err != nil {
				return fmt.Errorf("SANDCHAT_SANDBOX_%s: %q is not a whole number", v.name, intRaw[i])
			}
			*v.dst = n
		}
		for i, v := range sizes {
			n, err := parseSize(sizeRaw[i])
			if err != nil {
				return fmt.Errorf("SANDCHAT_SANDBOX_%s: %v", v.name, err)
			}
			*v.dst = n
		}
		e.MaxOutput, e.MaxCode = int(maxOutput), int(maxCode)
		for i, v := range durations {
			d, err := time.ParseDuration(strings.TrimSpace(durRaw[i]))
			if err != nil {
				return fmt.Errorf("SANDCHAT_SANDBOX_%s: %q is not a duration (e.g. 30s)", v.name, durRaw[i])
			}
			*v.dst = d
		}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		return nil
	}
}

func flagName(envName string) string { return strings.ReplaceAll(strings.ToLower(envName), "_", "-") }

func envBool(name string, def bool) bool {
	v := env(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
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
