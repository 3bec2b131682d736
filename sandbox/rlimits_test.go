package sandbox

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// TestBoundedWithoutCgroup: where the server cannot give a session a cgroup (a
// container's read-only /sys/fs/cgroup; here SANDCHAT_SANDBOX_CGROUPS=off), sessions
// still start, under bubblewrap, each bounded: a uid of its own with RLIMIT_NPROC, nice,
// RLIMIT_CPU and oom_score_adj above the server's, as the kernel holds them; a 2 GiB
// allocation is a MemoryError and the session lives on; a thread bomb through
// JavaScript's workers and Python's fork stay within the session's bound; a loop that
// ignores the interrupt is killed with every task of its uid while another session
// answers; nothing runs between runs.
func TestBoundedWithoutCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a uid per session needs a server running as root")
	}
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.Cgroups, c.Grace = proc.CgroupsOff, 500*time.Millisecond })
	if l := e.procs.launch.Jail; l.Cgroups != nil || !l.Strict() {
		t.Fatalf("isolation: %s", e.Status(context.Background()).Isolation)
	}
	for _, b := range e.Status(context.Background()).Bounds {
		t.Logf("%s: %s", b.What, b.How)
	}
	ctx := context.Background()

	t.Run("each session under a uid of its own, with its rlimits", func(t *testing.T) {
		uids := map[string]bool{}
		own, _ := strconv.Atoi(strings.TrimSpace(readFile(t, "/proc/self/oom_score_adj")))
		for _, k := range []string{"uid-a", "uid-b"} {
			mustSucceed(t, e, k, "1")
			pi, err := e.Inspect(k)
			if err != nil {
				t.Fatal(err)
			}
			uid, _ := strconv.Atoi(pi.UID)
			first := e.cfg.FirstUID
			if uid < first || uid >= first+e.adm.maxProcs+extraUIDs || uids[pi.UID] {
				t.Errorf("%s runs as uid %s: want one of its own from %d", k, pi.UID, first)
			}
			uids[pi.UID] = true
			if pi.MaxTasks != strconv.Itoa(proc.SessionTasks) || pi.MaxCPU != strconv.Itoa(proc.SessionCPUSeconds) ||
				pi.Nice != proc.SessionNice || pi.OOMScoreAdj != proc.SessionOOMScoreAdj || pi.OOMScoreAdj <= own {
				t.Errorf("%s: %+v (the server's oom_score_adj %d)", k, pi, own)
			}
			if pi.Cgroup != "" || len(pi.Namespaces) < 5 {
				t.Errorf("%s: cgroup %q, namespaces %v", k, pi.Cgroup, pi.Namespaces)
			}
		}
	})

	t.Run("process isolation too", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.Isolation = IsolationProcess })
		mustSucceed(t, e, "p", "1")
		pi, err := e.Inspect("p")
		if err != nil {
			t.Fatal(err)
		}
		if uid, _ := strconv.Atoi(pi.UID); uid < e.cfg.FirstUID || pi.MaxTasks != strconv.Itoa(proc.SessionTasks) || pi.OOMScoreAdj != proc.SessionOOMScoreAdj || pi.Nice != proc.SessionNice {
			t.Errorf("a process-mode session: %+v", pi)
		}
	})

	t.Run("a 2 GiB allocation is a MemoryError", func(t *testing.T) {
		k := "alloc"
		mustSucceed(t, e, k, "keep = 'still here'")
		before, _ := e.Inspect(k)
		r := mustSucceed(t, e, k, "try:\n    b = bytearray(2 * 1024**3 - 1)\n    r = len(b)\nexcept MemoryError:\n    r = 'MemoryError'\nr")
		if got := resultOf(r); got != "'MemoryError'" {
			t.Fatalf("a 2 GiB bytearray: %s", got)
		}
		after, _ := e.Inspect(k)
		if got := resultOf(mustSucceed(t, e, k, "keep")); got != "'still here'" || after.PID != before.PID {
			t.Fatalf("after the MemoryError: %s, process %d then %d", got, before.PID, after.PID)
		}
	})

	t.Run("forks and threads stay within the session's bound", func(t *testing.T) {
		k := "bomb"
		mustSucceed(t, e, k, "1")
		pi, _ := e.Inspect(k)
		uid, _ := strconv.Atoi(pi.UID)
		var most int
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				if n := threadsOfUID(uid); n > most {
					most = n
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
		r, err := e.Execute(ctx, k, Request{Timeout: 60 * time.Second, Code: sandboxtest.Bomb})
		close(stop)
		wg.Wait()
		t.Logf("run: %v %s %q %+v; the most threads the session's uid held: %d", err, r.Status, resultOf(r), r.Error, most)
		if err == nil && r.Status == StatusSuccess && !strings.HasPrefix(resultOf(r), "['OSError', 'OSError'") {
			t.Errorf("Python's fork or subprocess ran: %s", resultOf(r))
		}
		if most > proc.SessionTasks {
			t.Errorf("the session's uid held %d threads, past its bound of %d", most, proc.SessionTasks)
		}
		if got := resultOf(mustSucceed(t, e, "after-bomb", "6 * 7")); got != "42" {
			t.Fatalf("another session after the bomb: %s", got)
		}
	})

	t.Run("a loop that ignores the interrupt is killed while another session answers", func(t *testing.T) {
		k := "stubborn"
		mustSucceed(t, e, k, "x = 1")
		pi, _ := e.Inspect(k)
		uid, _ := strconv.Atoi(pi.UID)
		done := make(chan Result, 1)
		go func() {
			r, _ := e.Execute(ctx, k, Request{Timeout: 2 * time.Second, Code: sandboxtest.Stubborn})
			done <- r
		}()
		if got := resultOf(mustSucceed(t, e, "neighbour", "6 * 7")); got != "42" {
			t.Errorf("another session during the loop: %s", got)
		}
		r := <-done
		if r.Status != StatusTimeout {
			t.Fatalf("the loop: %s %+v", r.Status, r.Error)
		}
		if _, ok := testenv.Poll(10*time.Second, func() bool { return threadsOfUID(uid) == 0 }); !ok {
			t.Errorf("uid %d still has %d threads after its session was killed", uid, threadsOfUID(uid))
		}
		if got := resultOf(mustSucceed(t, e, k, "x")); got != "1" {
			t.Fatalf("the session after the kill: %s", got)
		}
	})

	t.Run("nothing runs between runs", func(t *testing.T) {
		k := "timers"
		mustSucceed(t, e, k, `import js
js.eval("globalThis.ticks = 0; setInterval(() => { ticks++; const t = Date.now(); while (Date.now() - t < 20) {} }, 1)")
js.eval("(async () => { const { Worker } = await import('node:worker_threads'); globalThis.w = new Worker('for (;;) {}', { eval: true }) })()")
import asyncio
await asyncio.sleep(0.3)`)
		pids := e.sess.get(k).Process().Tasks()
		var before int64
		if _, ok := testenv.Poll(5*time.Second, func() bool {
			// Stopped once the freeze, off the run's path, reached every task.
			for _, p := range pids {
				if st := procState(p); st != "T" && st != "" {
					return false
				}
			}
			return true
		}); !ok {
			t.Fatalf("the session's tasks were not stopped after its run")
		}
		before = cpuTicks(pids)
		time.Sleep(1500 * time.Millisecond)
		if used := cpuTicks(pids) - before; used > 10 {
			t.Fatalf("the session used %d ticks of CPU between runs", used)
		}
		if got := resultOf(mustSucceed(t, e, k, "import js, asyncio\na = js.ticks\nawait asyncio.sleep(0.2)\njs.ticks > a")); got != "True" {
			t.Fatalf("the session's timers did not resume during its run: %s", got)
		}
	})
}

// threadsOfUID counts the threads of every process whose real uid is uid.
func threadsOfUID(uid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	want := fmt.Sprintf("\nUid:\t%d\t", uid)
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/status")
		if err != nil || !strings.Contains(string(b), want) {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				c, _ := strconv.Atoi(strings.TrimSpace(v))
				n += c
			}
		}
	}
	return n
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
