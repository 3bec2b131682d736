package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sessions without a cgroup of their own: where the server cannot write one (a
// container's read-only /sys/fs/cgroup, the stock default of Docker, containerd and
// Kubernetes; a v2 group not delegated to it), each session process is still bounded,
// by what needs no cgroup write:
//   - memory: the interpreter's wasm heap has its maximum (Python's MemoryError past
//     it), V8's old generation its limit (--max-old-space-size), the engine retires a
//     process whose resident memory passes the session's cap, and the kernel's OOM
//     killer takes sessions first (oom_score_adj 1000; the server keeps its own);
//   - processes: a uid of its own per process (uidSlots) with RLIMIT_NPROC, so one
//     session's threads and processes count against its own bound only;
//   - CPU: the run's time limit (interrupt, then kill), nice 10 under the server, and
//     RLIMIT_CPU as a backstop;
//   - the node: the admission bound, sized from the memory the server may use
//     (ReadLimits: the container's limit).
// Without a freezer, the engine stops a session's tasks with SIGSTOP between runs, and
// kills them by their uid.

// Rlimit bounds of a session process without a cgroup.
const (
	// SessionCPUSeconds is RLIMIT_CPU: a backstop for CPU spent outside a run's time
	// limit. A process that used an hour of CPU is killed; its session comes back from
	// its saved state at its next run.
	SessionCPUSeconds = 3600
	// SessionNice is the nice value of session processes: the server's threads (0) run
	// first when sessions keep the CPUs busy.
	SessionNice = 10
	// SessionOOMScoreAdj makes the kernel's OOM killer choose a session before the
	// server when the container runs out of memory.
	SessionOOMScoreAdj = 1000
)

// uidSlots hands each session process a uid of its own from [first, first+n). A lock
// file per uid (flock) keeps two engines, in one process or several, from sharing one;
// a uid taken from a server that died is swept of its tasks before it is used again.
type uidSlots struct {
	first, n int
	dir      string
	mu       sync.Mutex // guards next
	next     int        // where the next search starts: a uid just given back is taken last
}

func newUIDSlots(first, n int) (*uidSlots, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sandchat-uids-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return &uidSlots{first: first, n: n, dir: dir}, nil
}

// uidLease is one uid held by one session process.
type uidLease struct {
	uid  int
	lock *os.File
}

// acquire takes a free uid, swept of any task a dead server left with it.
func (s *uidSlots) acquire() (*uidLease, error) {
	s.mu.Lock()
	start := s.next
	s.mu.Unlock()
	for i := range s.n {
		k := (start + i) % s.n
		uid := s.first + k
		f, err := os.OpenFile(filepath.Join(s.dir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		s.mu.Lock()
		s.next = (k + 1) % s.n
		s.mu.Unlock()
		if err := killUID(uid); err != nil {
			f.Close()
			return nil, err
		}
		return &uidLease{uid: uid, lock: f}, nil
	}
	return nil, fmt.Errorf("all %d session uids from %d are in use", s.n, s.first)
}

// release gives the uid back once none of its tasks is left.
func (l *uidLease) release() {
	if l == nil {
		return
	}
	_ = killUID(l.uid)
	l.lock.Close()
}

// killUID kills every task whose real uid is uid and waits until they are gone.
func killUID(uid int) error {
	for range 200 {
		pids := uidTasks(uid)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("uid %d: its tasks outlived 2 s of SIGKILL", uid)
}

// uidTasks lists the processes whose real uid is uid, zombies aside: they run nothing
// and go once their parent (the host's init, a container's) reaps them.
func uidTasks(uid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte("\nUid:\t" + strconv.Itoa(uid) + "\t")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err == nil && bytes.Contains(b, want) && !bytes.Contains(b, []byte("\nState:\tZ")) {
			out = append(out, pid)
		}
	}
	return out
}

// descendants lists pid and every process below it (threads are not listed: a signal
// to a process reaches them all).
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// signalTree sends sig to pid and its descendants, twice over for those forked
// meanwhile, and returns whom it reached.
func signalTree(pid int, sig syscall.Signal) []int {
	seen := map[int]bool{}
	var out []int
	for range 2 {
		for _, p := range descendants(pid) {
			if !seen[p] && syscall.Kill(p, sig) == nil {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// oomScoreAdj reads a process's oom_score_adj; ok is false when it cannot.
func oomScoreAdj(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// Rlimits reads what bounds process pid without a cgroup: its oom_score_adj, nice
// value, RLIMIT_NPROC and RLIMIT_CPU (soft limits, as /proc/PID/limits shows them).
func Rlimits(pid int) (oomAdj, nice int, nproc, cpu string) {
	oomAdj, _ = oomScoreAdj(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command's closing parenthesis; nice is the 19th of the line.
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 16 {
				nice, _ = strconv.Atoi(f[16])
			}
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Max processes") && len(f) > 2:
			nproc = f[2]
		case strings.HasPrefix(line, "Max cpu time") && len(f) > 3:
			cpu = f[3]
		}
	}
	return oomAdj, nice, nproc, cpu
}
