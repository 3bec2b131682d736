package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandchat/sandchat/migrations/testenv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// sessionProcesses counts, as the kernel sees them, the session processes of e: its
// session cgroups that hold a task.
func sessionProcesses(t *testing.T, e *Engine) int {
	t.Helper()
	root := e.procs.launch.Jail.CgroupRoot()
	if root == "" {
		t.Fatal("the engine runs without cgroups: this test needs strict isolation")
	}
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(root, d.Name(), "cgroup.procs"))
		if strings.TrimSpace(string(b)) != "" {
			n++
		}
	}
	return n
}

func TestAdmission(t *testing.T) {
	t.Parallel()
	t.Run("a burst never holds more processes than the bound, and loses nothing", func(t *testing.T) {
		const bound, sessions = 2, 5
		// Each run waits for room as long as it takes: this is about the bound and about
		// losing nothing, not about the deadline of a wait (the next test's). Under load
		// five starts through one slot outlast the default 30 s.
		e, _ := newEngine(t, func(c *Config) {
			c.MaxProcesses, c.MaxStarting, c.MaxLive, c.AdmitTimeout = bound, 1, 8, 10*time.Minute
		})
		stop := make(chan struct{})
		var most atomic.Int32
		var sampler sync.WaitGroup
		// The sampler ends before the engine does, however the test ends.
		stopSampler := sync.OnceFunc(func() { close(stop); sampler.Wait() })
		defer stopSampler()
		sampler.Go(func() {
			for {
				if n := int32(sessionProcesses(t, e)); n > most.Load() {
					most.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		})
		key := func(i int) string { return fmt.Sprintf("admission:%d", i) }
		var wg sync.WaitGroup
		for i := range sessions {
			wg.Go(func() {
				res, err := e.Execute(context.Background(), key(i), Request{Code: fmt.Sprintf("x = %d\nx", 10+i)})
				if err != nil || res.Status != StatusSuccess || resultOf(res) != fmt.Sprint(10+i) {
					t.Errorf("session %d: %v %s %s %+v", i, err, res.Status, resultOf(res), res.Error)
				}
			})
		}
		wg.Wait()
		// Every session was evicted at least once to make room; each comes back whole.
		for i := range sessions {
			if got := resultOf(mustSucceed(t, e, key(i), "x")); got != fmt.Sprint(10+i) {
				t.Errorf("session %d after eviction: x = %s", i, got)
			}
		}
		stopSampler()
		if m := most.Load(); m > bound {
			t.Fatalf("%d session processes at once; the bound is %d", m, bound)
		}
		if m := most.Load(); m == 0 {
			t.Fatal("the sampler never saw a session process")
		}
		if s := e.Status(context.Background()); s.MaxProcesses != bound || s.Waiting != 0 {
			t.Fatalf("status: max_processes %d, waiting %d", s.MaxProcesses, s.Waiting)
		}
	})

	t.Run("past the queue or its deadline a run gets 429 with Retry-After", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) {
			c.MaxProcesses, c.AdmitQueue, c.AdmitTimeout = 2, 1, time.Second
		})
		// Two sessions hold both processes, busy.
		var busy sync.WaitGroup
		for i := range 2 {
			busy.Go(func() {
				mustSucceed(t, e, fmt.Sprintf("busy:%d", i), "import time\ntime.sleep(6)\n'done'")
			})
		}
		testenv.Eventually(t, 60*time.Second, "both busy runs holding a process", func() bool {
			s := e.Status(context.Background())
			return s.LiveSess == 2
		})
		queued := make(chan error, 1)
		go func() {
			_, err := e.Execute(context.Background(), "waits", Request{Code: "1"})
			queued <- err
		}()
		testenv.Eventually(t, 10*time.Second, "one run waiting", func() bool { return e.Status(context.Background()).Waiting == 1 })
		_, full := e.Execute(context.Background(), "refused", Request{Code: "1"})
		for name, err := range map[string]error{"queue full": full, "deadline": <-queued} {
			var se *sandchat.Error
			if !errors.As(err, &se) || se.Code != sandchat.EBUSY || se.RetryAfter <= 0 || !strings.Contains(se.Message, "capacity") {
				t.Errorf("%s: %v, want busy with Retry-After naming the capacity", name, err)
			}
		}
		busy.Wait()
		// Room again: the same run goes through, once an idle session is evicted for it.
		// The eviction checkpoints first, which on a loaded machine (or under -race) can
		// take longer than the 1 s AdmitTimeout: a refusal meanwhile is what the bound
		// promises, and the next try finds the slot.
		testenv.Eventually(t, 2*time.Minute, "a run admitted", func() bool {
			r, err := e.Execute(context.Background(), "waits", Request{Code: "1"})
			if err != nil && sandchat.ErrorCode(err) != sandchat.EBUSY {
				t.Fatalf("after the busy runs: %v", err)
			}
			return err == nil && r.Status == StatusSuccess
		})
	})
}
