package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mallocMmapThreshold is glibc's MALLOC_MMAP_THRESHOLD_ in session processes (bytes).
const mallocMmapThreshold = "4194304"

// SessionTasks bounds the processes and threads of one session process (Deno runs about
// 20); a session cannot exhaust the machine's PIDs.
const SessionTasks = 128

// Spec is what the confinement of session processes is made from.
type Spec struct {
	// Strict runs each session process under bubblewrap (new user, PID, mount, IPC, UTS
	// and, without an allowlist, network namespaces; a read-only view of the runtime
	// only) in a cgroup of its own (memory, tasks, freezer). Without it, each session
	// runs in its own process with Deno's permissions as the only wall.
	Strict                                       bool
	SandboxUser                                  string // the user sessions run as when the server is root
	DenoPath, RuntimeDir, PyodideDir, PackageDir string
	PackageCacheDir                              string // where a session sees its view of the package cache
	BaseDir                                      string // the engine's packed base snapshots, read by every process
	MemoryBytes, RuntimeOverheadBytes            int64
	Net                                          []string // hosts sessions may reach; none: no network
	// Cgroups says whether each session process gets a cgroup of its own (strict
	// mode): CgroupsAuto where the server can make one, else rlimits bound it
	// (rlimits.go); CgroupsRequired refuses to start without; CgroupsOff never makes one.
	Cgroups string
	// FirstUID and Slots are the uids session processes run as without a cgroup: one
	// per process, [FirstUID, FirstUID+Slots).
	FirstUID, Slots int
	// MemoryMerge lets KSM merge the identical pages of session processes
	// (PR_SET_MEMORY_MERGE), where the kernel has it and KSM runs.
	MemoryMerge bool
}

// Cgroup modes (Spec.Cgroups).
const (
	CgroupsAuto     = "auto"
	CgroupsRequired = "required"
	CgroupsOff      = "off"
)

// Jail builds the command of a session process and its confinement.
type Jail struct {
	bwrap    string
	Cgroups  *Cgroups // nil without cgroup isolation
	uid, gid int      // the unprivileged user sessions run as; -1: as the server's own user
	cfg      Spec
	// Strict mode without a cgroup per session (rlimits.go): the uids session processes
	// run as, one each, and why there is no cgroup; nil with cgroups.
	slots    *uidSlots
	noCgroup error
	// merge is whether session processes ask for page merging; mergeOff, why not when
	// the configuration asked for it.
	merge    bool
	mergeOff string
}

// OpenJail checks that the isolation the configuration asks for is available; the
// error says what is missing and how to choose the weaker mode.
func OpenJail(cfg Spec, name string) (*Jail, error) {
	j := &Jail{cfg: cfg, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		uid, gid, err := lookupUser(cfg.SandboxUser)
		if err != nil {
			return nil, err
		}
		j.uid, j.gid = uid, gid
	}
	if !j.cfg.Strict {
		// No namespaces and no cgroup: where the server is root, each session still
		// gets a uid of its own and its rlimits (rlimits.go).
		if j.uid >= 0 {
			var err error
			if j.slots, err = newUIDSlots(cfg.FirstUID, cfg.Slots); err != nil {
				return nil, fmt.Errorf("session uids: %w", err)
			}
			j.noCgroup = errors.New("SANDCHAT_SANDBOX_ISOLATION is process")
		}
		if cfg.MemoryMerge {
			j.merge, j.mergeOff = memoryMergeAvailable()
		}
		return j, nil
	}
	weaker := " (to run with Deno's permissions as the only wall, set SANDCHAT_SANDBOX_ISOLATION=process)"
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, errors.New("bubblewrap (bwrap) is not installed: apt-get install bubblewrap" + weaker)
	}
	j.bwrap = bw
	// Namespaces: a throwaway sandbox proves they can be made here, as the sessions' user.
	probe := exec.Command(bw, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
		"--ro-bind", "/", "/", "--proc", "/proc", "--die-with-parent", "--", "/bin/true")
	probe.SysProcAttr = j.sysProcAttr()
	if out, err := probe.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bubblewrap cannot create namespaces here (%v: %s)%s", err, strings.TrimSpace(string(out)), weaker)
	}
	if cfg.Cgroups == CgroupsOff {
		err = errors.New("SANDCHAT_SANDBOX_CGROUPS is off")
	} else {
		j.Cgroups, err = openCgroups(name)
	}
	if err != nil {
		if cfg.Cgroups == CgroupsRequired {
			return nil, fmt.Errorf("no writable cgroup for session limits: %w (SANDCHAT_SANDBOX_CGROUPS=auto bounds sessions by rlimits instead)%s", err, weaker)
		}
		if j.uid < 0 {
			return nil, fmt.Errorf("no writable cgroup for session limits (%w), and without one each session needs a uid of its own, which only a server running as root can give%s", err, weaker)
		}
		j.Cgroups, j.noCgroup = nil, err
		if j.slots, err = newUIDSlots(cfg.FirstUID, cfg.Slots); err != nil {
			return nil, fmt.Errorf("session uids: %w", err)
		}
	}
	if cfg.MemoryMerge {
		j.merge, j.mergeOff = memoryMergeAvailable()
	}
	return j, nil
}

// memoryMergeAvailable tells whether session processes can ask KSM to merge their
// pages: the kernel knows PR_SET_MEMORY_MERGE and KSM runs; else why not.
func memoryMergeAvailable() (bool, string) {
	const prGetMemoryMerge = 68
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetMemoryMerge, 0, 0, 0, 0, 0); e != 0 {
		return false, fmt.Sprintf("this kernel has no PR_SET_MEMORY_MERGE (Linux 6.4 and later, built with CONFIG_KSM): %v", e)
	}
	b, err := os.ReadFile("/sys/kernel/mm/ksm/run")
	if err != nil {
		return false, "KSM is not available: " + err.Error()
	}
	if v := strings.TrimSpace(string(b)); v != "1" {
		return false, fmt.Sprintf("KSM does not run (/sys/kernel/mm/ksm/run is %s; as root on the host: echo 1 > /sys/kernel/mm/ksm/run)", v)
	}
	return true, ""
}

func lookupUser(name string) (int, int, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox user %q: %w (set SANDCHAT_SANDBOX_USER to an unprivileged user)", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, fmt.Errorf("sandbox user %q is root", name)
	}
	return uid, gid, nil
}

func (j *Jail) sysProcAttr() *syscall.SysProcAttr { return j.sysProcAttrAs(j.uid) }

// sysProcAttrAs starts a process as uid (with the sandbox user's group), or as the
// server's own user for -1.
func (j *Jail) sysProcAttrAs(uid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true}
	if uid >= 0 {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(j.gid), Groups: []uint32{}}
	}
	return a
}

// Describe names the isolation in force, for doctor, the status endpoint and the
// tool catalogue.
func (j *Jail) Describe() string {
	if !j.cfg.Strict && j.slots == nil {
		return "process per session, Deno permissions only (no namespaces, no cgroup limits)"
	}
	if !j.cfg.Strict {
		return "process per session, Deno permissions only (no namespaces, no cgroup limits), bounded by rlimits and a uid of its own"
	}
	net := "no network"
	if len(j.cfg.Net) > 0 {
		net = "network allowlist " + strings.Join(j.cfg.Net, ",")
	}
	ns := fmt.Sprintf("process per session under bubblewrap (user, pid, mount, ipc, uts namespaces; %s)", net)
	if j.Cgroups == nil {
		return ns + fmt.Sprintf(", bounded by rlimits and a uid of its own (no cgroup per session: %v)", j.noCgroup)
	}
	ctrl := "memory, pids, freezer"
	if j.Cgroups.version == 2 {
		ctrl = "memory, pids, freeze"
	}
	return ns + fmt.Sprintf(" in cgroup v%d (%s)", j.Cgroups.version, ctrl)
}

// Bound is one mechanism that bounds a session, named for doctor and the status.
type Bound struct {
	What   string `json:"what"`   // memory, processes, cpu, between runs, page merging
	How    string `json:"how"`    // the mechanism and its figure
	Weaker bool   `json:"weaker"` // weaker than the kernel's cap a cgroup would give
}

// Bounds names each mechanism that bounds a session process, with its figures.
func (j *Jail) Bounds() []Bound {
	mem := j.cfg.MemoryBytes >> 20
	heap := fmt.Sprintf("the wasm heap's maximum (%d MiB: MemoryError past it), V8's heap limit (%d MiB)", mem, min(mem, 1024))
	var out []Bound
	switch {
	case !j.cfg.Strict && j.slots == nil:
		out = []Bound{
			{What: "memory", How: heap + fmt.Sprintf("; the engine stops a process whose resident memory passes %d MiB", j.MemoryLimit()>>20), Weaker: true},
			{What: "processes", How: "none: Deno's permissions (no subprocess)", Weaker: true},
			{What: "cpu", How: "the run's time limit", Weaker: true},
		}
	case j.Cgroups != nil:
		files := map[int][2]string{1: {"memory.limit_in_bytes", "freezer.state"}, 2: {"memory.max", "cgroup.freeze"}}[j.Cgroups.version]
		out = []Bound{
			{What: "memory", How: fmt.Sprintf("cgroup %s %d MiB for the whole process (the kernel's cap); within it %s", files[0], j.MemoryLimit()>>20, heap)},
			{What: "processes", How: fmt.Sprintf("cgroup pids.max %d (threads included)", SessionTasks)},
			{What: "cpu", How: "the run's time limit; the cgroup is frozen between runs (" + files[1] + ")"},
		}
	default:
		own, _ := oomScoreAdj(os.Getpid())
		out = []Bound{
			{What: "memory", How: fmt.Sprintf("%s; the engine stops a process whose resident memory passes %d MiB; the kernel's OOM killer takes sessions first (oom_score_adj %d, the server's %d)",
				heap, j.MemoryLimit()>>20, SessionOOMScoreAdj, own), Weaker: true},
			{What: "processes", How: fmt.Sprintf("RLIMIT_NPROC %d per session, each process under a uid of its own (%d-%d)", SessionTasks, j.cfg.FirstUID, j.cfg.FirstUID+j.cfg.Slots-1), Weaker: true},
			{What: "cpu", How: fmt.Sprintf("the run's time limit; nice %d; RLIMIT_CPU %d s as a backstop; stopped (SIGSTOP) between runs", SessionNice, SessionCPUSeconds), Weaker: true},
			{What: "cgroup", How: "none per session: " + j.noCgroup.Error(), Weaker: true},
		}
	}
	switch {
	case j.merge:
		out = append(out, Bound{What: "page merging", How: "on: KSM merges identical pages of session processes (PR_SET_MEMORY_MERGE)"})
	case j.mergeOff != "":
		out = append(out, Bound{What: "page merging", How: "asked for but off: " + j.mergeOff, Weaker: true})
	}
	return out
}

// MemoryLimit is the kernel's cap on a whole session process: the interpreter's heap
// plus what Deno, V8 and the compiled wasm need beside it.
func (j *Jail) MemoryLimit() int64 { return j.cfg.MemoryBytes + j.cfg.RuntimeOverheadBytes }

// denoArgs is the command line of the session process inside its sandbox; pkgs is its
// view of the package cache (internal/pkgs), "" for none.
func (j *Jail) denoArgs(pkgs string) []string {
	cfg := j.cfg
	if pkgs != "" && j.cfg.Strict {
		pkgs = cfg.PackageCacheDir // where bubblewrap binds the view
	}
	reads := Dirs(cfg.RuntimeDir, cfg.PyodideDir, cfg.PackageDir, pkgs, j.baseDir(), "/dev/fd/3")
	args := []string{cfg.DenoPath, "run", "--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm",
		"--unstable-worker-options", "--quiet",
		"--allow-read=" + strings.Join(reads, ","),
		"--allow-write=/dev/fd/4",
		"--v8-flags=" + v8Flags(cfg.MemoryBytes),
	}
	if nets := cfg.Net; len(nets) > 0 {
		args = append(args, "--allow-net="+strings.Join(nets, ","))
	}
	return append(args, filepath.Join(cfg.RuntimeDir, "host.ts"))
}

// v8Flags tunes V8 for a session process:
//   - The heaps are sized for a start, not left to grow into it: starting Pyodide
//     promotes ~16 MiB of live objects, and with V8's defaults the Worker's isolate ran
//     16-18 scavenges and two full collections to get there (~80 ms of CPU, most of it
//     on V8's helper threads), for ~4 MiB of garbage. The first full collection now
//     waits for 48 MiB of old generation, and a 4 MiB young generation (V8 grows it to
//     16 MiB per isolate, and keeps it) keeps start-up to 4-7 scavenges: a ready process
//     takes ~10 % less CPU, an idle session ~4 MiB more PSS (docs/sandbox.md, "GC at
//     start-up"). The interpreter's heap is wasm, outside both.
//   - The old generation is bounded by the session's memory (at most 1 GiB).
//   - Wasm functions move from Liftoff to TurboFan after 1e9 "bytes executed" rather than
//     1.3e7: the functions a restore, a first run or a short cell makes hot are no longer
//     recompiled on V8's helper threads while the run waits for the cores, and a long
//     computation still reaches TurboFan code within its first second. Measured on two
//     cores (docs/sandbox.md, "Wasm tier-up"): short cells 2-3x faster, a 100-conversation
//     burst ~7 % shorter, the same speed once hot; Liftoff alone would run 3x slower.
func v8Flags(memoryBytes int64) string {
	return strings.Join([]string{
		"--max-semi-space-size=4",
		"--initial-old-space-size=48",
		"--max-old-space-size=" + strconv.FormatInt(min(memoryBytes>>20, 1024), 10),
		"--wasm-tiering-budget=1000000000",
	}, ",")
}

// bwrapArgs confines the session process: nothing of the host but the dynamic loader's
// libraries and the runtime, read-only; a private /tmp (bounded) and /dev; no network
// namespace interfaces but loopback unless the network allowlist asks for the host's.
// The session's view of the package cache, pkgs, appears where the cache is: the cache
// itself never does. Deno's own cache (DENO_DIR) is the node's compiled-code cache
// (codecache.go) when code names it, read-only unless this process fills it.
func (j *Jail) bwrapArgs(pkgs string, code CodeMount) []string {
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox",
		"--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "DENO_DIR", DenoDir, "--setenv", "NO_COLOR", "1",
		"--setenv", "DENO_NO_UPDATE_CHECK", "1", "--setenv", "DENO_NO_PROMPT", "1", "--setenv", "PATH", "/nonexistent",
		// glibc gives each thread of Deno its own malloc arena (64 MiB chunks): two keep a
		// session process ~35 MiB smaller (one is smaller still, but triples a save's time).
		// A fixed mmap threshold: buffers of 4 MiB and more (snapshots, the wasm file,
		// large frames) get their own mappings, returned to the kernel when freed; glibc
		// would otherwise raise the threshold to 32 MiB and keep freed buffers in its
		// arenas. Lower (128 KiB) costs a restore ~9 000 more page faults for no smaller
		// process: V8's compile zones then come fresh from the kernel every time.
		"--setenv", "MALLOC_ARENA_MAX", "2", "--setenv", "MALLOC_MMAP_THRESHOLD_", mallocMmapThreshold,
		"--proc", "/proc", "--dev", "/dev", "--size", strconv.Itoa(64 << 20), "--tmpfs", "/tmp", "--chdir", "/tmp",
	}
	if len(j.cfg.Net) == 0 {
		a = append(a, "--unshare-net")
	} else {
		for _, f := range []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf"} {
			a = append(a, "--ro-bind-try", f, f)
		}
	}
	for _, d := range []string{"/lib", "/lib64", "/lib32", "/libx32"} {
		if t, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", t, d)
		} else {
			a = append(a, "--ro-bind-try", d, d)
		}
	}
	a = append(a, "--ro-bind-try", "/usr/lib", "/usr/lib", "--ro-bind-try", "/usr/lib64", "/usr/lib64",
		"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache")
	for _, d := range Dirs(j.cfg.RuntimeDir, j.cfg.PyodideDir, j.cfg.PackageDir, j.cfg.DenoPath) {
		a = append(a, "--ro-bind", d, d)
	}
	if pkgs != "" {
		a = append(a, "--ro-bind", pkgs, j.cfg.PackageCacheDir)
	}
	if j.cfg.BaseDir != "" {
		a = append(a, "--ro-bind", j.cfg.BaseDir, BaseMount)
	}
	if code.Dir != "" {
		bind := "--ro-bind"
		if code.Fill {
			bind = "--bind"
		}
		a = append(a, bind, code.Dir, DenoDir)
	}
	return append(a, "--")
}

// command makes the session process's command. In strict mode a gate shell starts it:
// the engine moves the gate into the session's cgroup and only then lets it exec
// bubblewrap, so no task of the session ever runs outside its limits. The gate reads fd
// 5; fds 3 and 4 are the protocol's pipes. pkgs is the session's view of the package
// cache, "" for none; code, the compiled-code cache it mounts (none in process mode).
func (j *Jail) command(pkgs string, code CodeMount, uid int) *exec.Cmd {
	var cmd *exec.Cmd
	switch {
	case !j.cfg.Strict && j.slots == nil && !j.merge:
		deno := j.denoArgs(pkgs)
		cmd = exec.Command(deno[0], deno[1:]...)
		cmd.SysProcAttr = j.sysProcAttr()
	case j.slots == nil && !j.merge:
		args := append([]string{"-c", `read -r _ <&5 || exit 97; exec 5<&-; exec "$@"`, "sandchat-gate", j.bwrap}, j.bwrapArgs(pkgs, code)...)
		cmd = exec.Command("/bin/sh", append(args, j.denoArgs(pkgs)...)...)
		cmd.SysProcAttr = j.sysProcAttrAs(uid)
	default:
		// The Go gate (gate.go): rlimits, page merging, then the session's uid.
		g := gateSpec{UID: uid, GID: j.gid, Merge: j.merge}
		if j.slots != nil {
			g.Rlimits, g.NProc, g.CPUSeconds, g.Nice, g.OOMScoreAdj = true, SessionTasks, SessionCPUSeconds, SessionNice, SessionOOMScoreAdj
		}
		args := []string{g.String()}
		if j.cfg.Strict {
			args = append(append(args, j.bwrap), j.bwrapArgs(pkgs, code)...)
		}
		cmd = exec.Command("/proc/self/exe", append(args, j.denoArgs(pkgs)...)...)
		cmd.Args[0] = gateArg0
		cmd.SysProcAttr = j.sysProcAttrAs(-1)
	}
	// A task that outlived the kill must not keep Wait on the console pipe for ever.
	cmd.WaitDelay = time.Second
	cmd.Dir = "/"
	cmd.Env = []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", "DENO_NO_PROMPT=1", "MALLOC_ARENA_MAX=2", "MALLOC_MMAP_THRESHOLD_=" + mallocMmapThreshold}
	return cmd
}

// BaseMount is where a sandboxed process sees the engine's packed bases: one path for
// every engine, so that it does not change the compiled-code cache's key.
const BaseMount = "/sandchat-bases"

// baseDir is the directory of packed bases as the process sees it; "" for none.
func (j *Jail) baseDir() string {
	if j.cfg.BaseDir == "" || !j.cfg.Strict {
		return j.cfg.BaseDir
	}
	return BaseMount
}

// Dirs is paths without the empty ones and the repeated ones, in order.
func Dirs(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Strict tells whether sessions run under bubblewrap and a cgroup.
func (j *Jail) Strict() bool { return j.cfg.Strict }

// User is the uid and gid sessions run as; -1, -1 as the server's own user.
func (j *Jail) User() (uid, gid int) { return j.uid, j.gid }

// Close removes the sessions' cgroups.
func (j *Jail) Close() {
	if j.Cgroups != nil {
		j.Cgroups.close()
	}
}

// CgroupRoot is the group that holds the sessions' groups (v1: in the memory
// hierarchy), "" without cgroups.
func (j *Jail) CgroupRoot() string {
	if j.Cgroups == nil {
		return ""
	}
	if j.Cgroups.version == 1 {
		return j.Cgroups.roots["memory"]
	}
	return j.Cgroups.roots["unified"]
}

// Merging tells whether session processes ask KSM to merge their pages.
func (j *Jail) Merging() bool { return j.merge }
