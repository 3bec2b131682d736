package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sandchat/sandchat/sandbox/internal/proc"

	"github.com/sandchat/sandchat"
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

// admission is the engine's two gates and its evictions in flight.
type admission struct {
	procs, starts *admit.Gate
	maxProcs      int

	mu         sync.Mutex
	reclaiming int // evicted processes not gone yet: each frees one slot soon
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

// admitProc waits for room for one more session process. wait bounds the wait (with
// AdmitTimeout): the caller giving up leaves the queue.
func (e *Engine) admitProc(wait context.Context) (*slot, error) {
	ctx, cancel := context.WithTimeout(wait, e.cfg.AdmitTimeout)
	defer cancel()
	err := e.adm.procs.Acquire(ctx)
	switch {
	case err == nil:
		return &slot{g: e.adm.procs}, nil
	case wait.Err() != nil:
		return nil, wait.Err()
	case errors.Is(err, admit.ErrQueueFull):
		return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
			"The Python sandbox of this server is at capacity (%d session processes, %d runs waiting); try again in a few seconds.",
			e.adm.maxProcs, e.cfg.AdmitQueue)}
	}
	return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
		"The Python sandbox of this server is at capacity (%d session processes): no room freed within %s; try again in a few seconds.",
		e.adm.maxProcs, e.cfg.AdmitTimeout)}
}

// errNoRoom is what a pool refill meets when the node has no slot to spare: it waits.
var errNoRoom = errors.New("no room for another session process")

// spawn starts a session process within the node's bounds: it waits for room (as long
// as wait and AdmitTimeout allow), then for a turn to start one, and runs prep (loading
// a heap: the rest of the CPU-bound start) in that turn. ctx bounds the start itself.
func (e *Engine) spawn(wait, ctx context.Context, base []byte, prep func(*proc.Process) error) (*proc.Process, error) {
	s, err := e.admitProc(wait)
	if err != nil {
		return nil, err
	}
	if err := e.adm.starts.Acquire(ctx); err != nil {
		s.release()
		return nil, e.procErr(err, nil, 0)
	}
	defer e.adm.starts.Release()
	p, err := e.startProc(ctx, base, false, s)
	if err != nil {
		return nil, e.procErr(err, nil, 0)
	}
	if prep != nil {
		if err := prep(p); err != nil {
			p.Close("start failed")
			return nil, err
		}
	}
	return p, nil
}

// trySpawn is spawn for work that can wait (the pool): it takes room and a start turn
// only if both are free and no run waits for them, else errNoRoom.
func (e *Engine) trySpawn(ctx context.Context, base []byte, warmup bool) (*proc.Process, error) {
	if !e.adm.procs.TryAcquire() {
		return nil, errNoRoom
	}
	s := &slot{g: e.adm.procs}
	if !e.adm.starts.TryAcquire() {
		s.release()
		return nil, errNoRoom
	}
	defer e.adm.starts.Release()
	return e.startProc(ctx, base, warmup, s)
}

// reclaim frees one process slot for a run that waits, unless evictions already under
// way will: a pooled process nobody took first, else the least recently used idle
// session. Called when a run starts waiting and when a run ends while some wait.
func (e *Engine) reclaim() {
	a := e.adm
	a.mu.Lock()
	if a.reclaiming >= a.procs.Waiting() {
		a.mu.Unlock()
		return
	}
	pooled := e.pool.evictOne()
	var lv *live
	if pooled == nil {
		lv = e.sess.forgetOldestIdle()
	}
	if pooled == nil && lv == nil {
		a.mu.Unlock()
		return
	}
	a.reclaiming++
	a.mu.Unlock()
	go func() {
		if pooled != nil {
			pooled.Close("evicted: room for a waiting run (pooled)")
		} else {
			e.retire(lv, "evicted: room for a waiting run (least recently used)")
		}
		a.mu.Lock()
		a.reclaiming--
		a.mu.Unlock()
	}()
}
