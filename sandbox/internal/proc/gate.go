package proc

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The gate in Go: the server's own binary, started again as gateArg0, sets up a session
// process before it becomes bubblewrap. A shell cannot do what it does: set rlimits and
// page merging for the process, then drop to the session's uid. It starts as the
// server's user, so the binary need not be readable by the sessions' users (a test
// binary in a private directory is not). Used where the session has no cgroup of its
// own (its bounds are then rlimits, its nice value and its oom_score_adj) and where page
// merging is on; the shell gate of jail.go does the rest.

// gateArg0 is argv[0] of the Go gate; init hands such a process to gateMain.
const gateArg0 = "sandchat-gate"

// gateSpec is what the Go gate does before it execs the command: its one argument.
type gateSpec struct {
	UID, GID    int
	Rlimits     bool  // set NProc, CPUSeconds, Nice and OOMScoreAdj
	NProc       int   // RLIMIT_NPROC: the session uid's tasks, threads included
	CPUSeconds  int   // RLIMIT_CPU: SIGXCPU past it, SIGKILL 5 s later
	DataBytes   int64 // RLIMIT_DATA; 0: none
	Nice        int   // the session's nice value (the server's is lower)
	OOMScoreAdj int   // the kernel's OOM killer takes the highest first
	Merge       bool  // PR_SET_MEMORY_MERGE: KSM may merge the process's identical pages
}

func (g gateSpec) String() string {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	return fmt.Sprintf("uid=%d,gid=%d,rlimits=%d,nproc=%d,cpu=%d,data=%d,nice=%d,oom=%d,merge=%d",
		g.UID, g.GID, b(g.Rlimits), g.NProc, g.CPUSeconds, g.DataBytes, g.Nice, g.OOMScoreAdj, b(g.Merge))
}

func parseGateSpec(s string) (gateSpec, error) {
	var g gateSpec
	fields := map[string]*int64{}
	var uid, gid, rl, nproc, cpu, nice, oom, merge int64
	for k, p := range map[string]*int64{"uid": &uid, "gid": &gid, "rlimits": &rl, "nproc": &nproc, "cpu": &cpu,
		"data": &g.DataBytes, "nice": &nice, "oom": &oom, "merge": &merge} {
		fields[k] = p
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		p, ok := fields[k]
		if !ok {
			return g, fmt.Errorf("gate: unknown %q", k)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return g, fmt.Errorf("gate: %s: %w", k, err)
		}
		*p = n
	}
	g.UID, g.GID, g.Rlimits, g.NProc, g.CPUSeconds = int(uid), int(gid), rl == 1, int(nproc), int(cpu)
	g.Nice, g.OOMScoreAdj, g.Merge = int(nice), int(oom), merge == 1
	return g, nil
}

func init() {
	if len(os.Args) > 2 && os.Args[0] == gateArg0 {
		os.Exit(gateMain(os.Args[1], os.Args[2:]))
	}
}

// prSetMemoryMerge is PR_SET_MEMORY_MERGE (Linux 6.4; kept across exec from 6.7).
const prSetMemoryMerge = 67

// gateMain waits for the engine's word on fd 5 (the process is in its cgroup, if it has
// one), applies spec, drops to the session's user and execs argv. It returns only on a
// failure, with the exit status the engine reports.
func gateMain(spec string, argv []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sandchat-gate: "+format+"\n", a...)
		return 97
	}
	g, err := parseGateSpec(spec)
	if err != nil {
		return fail("%v", err)
	}
	gate := os.NewFile(5, "gate")
	if _, err := bufio.NewReader(gate).ReadString('\n'); err != nil {
		return fail("the engine's go-ahead did not come: %v", err)
	}
	gate.Close()
	if g.Merge {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetMemoryMerge, 1, 0, 0, 0, 0); e != 0 {
			return fail("PR_SET_MEMORY_MERGE: %v", e)
		}
	}
	if g.Rlimits {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(g.OOMScoreAdj)), 0); err != nil {
			return fail("oom_score_adj: %v", err)
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, g.Nice); err != nil {
			return fail("nice: %v", err)
		}
		lims := []struct {
			res        int
			soft, hard uint64
		}{
			{rlimitNProc, uint64(g.NProc), uint64(g.NProc)},
			{syscall.RLIMIT_CPU, uint64(g.CPUSeconds), uint64(g.CPUSeconds) + 5},
		}
		if g.DataBytes > 0 {
			lims = append(lims, struct {
				res        int
				soft, hard uint64
			}{syscall.RLIMIT_DATA, uint64(g.DataBytes), uint64(g.DataBytes)})
		}
		for _, l := range lims {
			if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: l.soft, Max: l.hard}); err != nil {
				return fail("rlimit %d: %v", l.res, err)
			}
		}
	}
	if g.UID >= 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return fail("setgroups: %v", err)
		}
		if err := syscall.Setgid(g.GID); err != nil {
			return fail("setgid %d: %v", g.GID, err)
		}
		if err := syscall.Setuid(g.UID); err != nil {
			return fail("setuid %d: %v", g.UID, err)
		}
	}
	err = syscall.Exec(argv[0], argv, os.Environ())
	return fail("exec %s: %v", argv[0], err)
}

// rlimitNProc is RLIMIT_NPROC, which package syscall does not name.
const rlimitNProc = 6
