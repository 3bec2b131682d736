package sandbox

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sandchat/sandchat/sandbox/internal/admit"
)

// Admission: a node holds at most MaxProcesses session processes (starting, live and
// pooled) and starts at most MaxStarting at once. A run that needs a new process waits
// its turn in a fair queue; meanwhile the engine evicts an idle one (a pooled process
// nobody took, else the least recently used idle session, whose state is durable) to
// make room. Past the queue's bound or its deadline the run is refused with 429.

// perProcessRAM is the memory the automatic bound reserves for each session process:
// an idle one takes about half of it, and a busy one more.
const perProcessRAM = 512 << 20

// AutoMaxProcesses is the bound MaxProcesses 0 stands for: one process per 512 MiB of
// the machine's memory, between 4 and 256.
func AutoMaxProcesses() int {
	total := memTotal()
	if total <= 0 {
		return 16
	}
	return int(min(max(total/perProcessRAM, 4), 256))
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

// admission is the engine's two gates.
type admission struct {
	procs, starts *admit.Gate
	maxProcs      int
}

func newAdmission(cfg Config, reclaim func()) *admission {
	procs := cfg.MaxProcesses
	if procs == 0 {
		procs = AutoMaxProcesses()
	}
	starting := cfg.MaxStarting
	if starting == 0 {
		starting = runtime.NumCPU()
	}
	return &admission{
		procs: admit.New(procs, cfg.AdmitQueue, reclaim),
		// Every starter holds a process slot already: the queue can be as long as that.
		starts:   admit.New(starting, procs, nil),
		maxProcs: procs,
	}
}

// slot is one process's place under the node's bound; release gives it back, once.
type slot struct {
	once sync.Once
	g    *admit.Gate
}

func (s *slot) release() {
	if s != nil {
		s.once.Do(s.g.Release)
	}
}
