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
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/admit"
)

// Admission: a node holds at most MaxProcesses session processes (starting, live and
// pooled) and starts at most MaxStarting at once. A run that needs a new process waits
// its turn in a fair queue; meanwhile the engine evicts an idle one (a pooled process
// nobody took, else the least recently used idle session, whose state is durable) to
// make room. Past the queue's bound or its deadline the run is refused with 429.
//
// Between users the node is shared: one user's runs hold at most a share of its
// processes (all but a quarter, at least one, kept for the others: admit.ShareOf), so
// six long runs of one user leave room for another user's first run. A user past the
// share waits for one of their own runs to end (Request.User), never another user's.

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

// admission is the engine's two gates, and the users' shares of the first.
type admission struct {
	procs, starts *admit.Gate
	users         *admit.Shares
	maxProcs      int
	queue         int           // runs that may wait for a process (AdmitQueue)
	timeout       time.Duration // the longest one waits (AdmitTimeout)
}

func newAdmission(cfg Config) *admission {
	procs := cfg.MaxProcesses
	if procs == 0 {
		procs = AutoMaxProcesses()
	}
	starting := cfg.MaxStarting
	if starting == 0 {
		starting = runtime.NumCPU()
	}
	return &admission{
		procs: admit.New(procs, cfg.AdmitQueue),
		// Every starter holds a process slot already: the queue can be as long as that.
		starts:   admit.New(starting, procs),
		users:    admit.NewShares(admit.ShareOf(procs), cfg.AdmitQueue),
		maxProcs: procs,
		queue:    cfg.AdmitQueue,
		timeout:  cfg.AdmitTimeout,
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

// user waits until user may start one more run on this node: while they have their
// share of its processes running, their next run waits (up to AdmitTimeout) for one of
// them to end. release gives the place back when the run is over. An empty user (an
// operator's command) is not counted. ctx ending (the caller gone) leaves the queue.
func (a *admission) user(ctx context.Context, user string) (release func(), err error) {
	if user == "" {
		return func() {}, nil
	}
	wait, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	err = a.users.Acquire(wait, user)
	switch {
	case err == nil:
		var once sync.Once
		return func() { once.Do(func() { a.users.Release(user) }) }, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, admit.ErrQueueFull):
		return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
			"You already have %d runs going on this server (each user's share of its %d session processes) and %d more waiting; try again when one has finished.",
			a.users.Share(), a.maxProcs, a.queue)}
	}
	return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 5, Message: fmt.Sprintf(
		"You already have %d runs going on this server (each user's share of its %d session processes), and none finished within %s; try again when one has.",
		a.users.Share(), a.maxProcs, a.timeout)}
}
