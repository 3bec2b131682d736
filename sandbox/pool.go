package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// pool keeps session processes ready ahead of demand, so that a new conversation's
// first run does not pay for starting Deno and restoring Pyodide (~0.4 s):
//   - ready processes hold the base interpreter, warmed up, waiting for a new session;
//   - spares are primed (Deno up, Pyodide imported, wasm compiled, base heap laid out)
//     and wait for a saved session's heap, so a cold restore skips all of that.
//
// The number of ready processes follows demand: it is the most new sessions seen in
// any minute of the last quarter hour, between WarmPool and WarmPoolMax, so a burst that
// came once finds the pool sized for it when it comes again. Refills run one or two
// at a time, and wait while a session's first run is under way.
type pool struct {
	procs  *nodeProcs
	cfg    *Config // the engine's
	log    *slog.Logger
	ctx    context.Context // the engine's: refills stop when it ends
	wg     *sync.WaitGroup // the engine's background work
	closed func() bool     // the engine is shut down

	mu           sync.Mutex // guards the fields below: the processes kept, the refills under way and the demand seen
	ready        []*proc.Process
	spares       []*proc.Process
	fillingReady int
	fillingSpare int
	takes        []time.Time
	quiet        time.Time // no refill before this: a new session's first run goes first
	wake         chan struct{}
	started      bool
}

const (
	poolFillers     = 2
	poolDemandSpan  = 15 * time.Minute
	poolDemandSlot  = time.Minute
	poolQuietAfter  = 250 * time.Millisecond
	poolRetryPause  = time.Second
	poolStartBudget = 2 * time.Minute
)

func newPool(n *nodeProcs, ctx context.Context, wg *sync.WaitGroup, closed func() bool) *pool {
	return &pool{procs: n, cfg: n.cfg, log: n.log, ctx: ctx, wg: wg, closed: closed, wake: make(chan struct{}, 1)}
}

func (p *pool) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	for range poolFillers {
		p.wg.Add(1)
		go p.fill()
	}
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// target is how many ready processes the pool aims for now.
func (p *pool) target() int {
	cfg := p.cfg
	now := time.Now()
	keep := p.takes[:0]
	for _, t := range p.takes {
		if now.Sub(t) < poolDemandSpan {
			keep = append(keep, t)
		}
	}
	p.takes = keep
	peak := 0
	for i := range keep {
		n := 0
		for j := i; j < len(keep) && keep[j].Sub(keep[i]) < poolDemandSlot; j++ {
			n++
		}
		peak = max(peak, n)
	}
	return min(max(cfg.WarmPool, peak), cfg.WarmPoolMax)
}

// takeReady hands out a process holding the base interpreter, or nil.
func (p *pool) takeReady() *proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes = append(p.takes, time.Now())
	return p.take(&p.ready)
}

// takeSpare hands out a primed process for a restore, or nil.
func (p *pool) takeSpare() *proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.take(&p.spares)
}

// take pops the first live process of list and wakes a filler; called with p.mu held.
// Refills wait a moment: the new session's first run goes first.
func (p *pool) take(list *[]*proc.Process) *proc.Process {
	p.quiet = time.Now().Add(poolQuietAfter)
	defer p.poke()
	for len(*list) > 0 {
		pr := (*list)[0]
		*list = (*list)[1:]
		if pr.Alive() {
			return pr
		}
	}
	return nil
}

func (p *pool) sizes() (ready, spares int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready), len(p.spares)
}

// spareProcs are the spares the pool holds now, for the bench.
func (p *pool) spareProcs() []*proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*proc.Process(nil), p.spares...)
}

// idle tells whether the pool is full and no refill is under way, for the bench.
func (p *pool) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fillingReady+p.fillingSpare == 0 && len(p.ready) >= p.target() && len(p.spares) >= p.cfg.WarmSpares
}

// next says what a filler should make: a ready process, a spare, or nothing yet.
func (p *pool) next() (what string, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := time.Until(p.quiet); d > 0 {
		return "", d
	}
	for _, list := range []*[]*proc.Process{&p.ready, &p.spares} {
		alive := (*list)[:0]
		for _, pr := range *list {
			if pr.Alive() {
				alive = append(alive, pr)
			}
		}
		*list = alive
	}
	needReady := p.target() - len(p.ready) - p.fillingReady
	needSpare := p.cfg.WarmSpares - len(p.spares) - p.fillingSpare
	switch {
	case needReady > 0 && len(p.ready)+p.fillingReady == 0, needReady > 0 && needSpare <= 0:
		// A ready process first: a new conversation is the commoner wait.
		p.fillingReady++
		return "ready", 0
	case needSpare > 0:
		p.fillingSpare++
		return "spare", 0
	case needReady > 0:
		p.fillingReady++
		return "ready", 0
	}
	return "", time.Minute
}

func (p *pool) fill() {
	defer p.wg.Done()
	for {
		what, wait := p.next()
		if what == "" {
			if !p.sleep(wait, true) {
				return
			}
			continue
		}
		pr, err := p.make(what == "ready")
		p.mu.Lock()
		if what == "ready" {
			p.fillingReady--
		} else {
			p.fillingSpare--
		}
		closed := p.closed()
		if err == nil && !closed {
			if what == "ready" {
				p.ready = append(p.ready, pr)
			} else {
				p.spares = append(p.spares, pr)
			}
		}
		p.mu.Unlock()
		if err == nil && closed {
			pr.Close("the sandbox engine is shut down")
		}
		if errors.Is(err, errNoRoom) {
			// Runs come first: refill once one ends and the node has room again.
			if !p.sleep(poolRetryPause, true) {
				return
			}
			continue
		}
		if err != nil {
			if closed {
				return
			}
			p.log.Warn("sandbox warm pool refill failed", "err", err)
			if !p.sleep(poolRetryPause, false) {
				return
			}
		}
	}
}

// sleep waits d, or until a take wakes the pool when wakeable; false when the engine
// stops meanwhile.
func (p *pool) sleep(d time.Duration, wakeable bool) bool {
	wake := p.wake
	if !wakeable {
		wake = nil
	}
	select {
	case <-p.ctx.Done():
		return false
	case <-wake:
	case <-time.After(d):
	}
	return true
}

// make starts a process: primed with the current base, and for a ready one, the base
// interpreter loaded and warmed up (its RNG seeded and the first passes of the driver
// and of the heap diff paid for).
func (p *pool) make(ready bool) (*proc.Process, error) {
	ctx, cancel := context.WithTimeout(p.ctx, poolStartBudget)
	defer cancel()
	pr, err := p.procs.trySpawn(ctx, p.procs.currentBase(), !ready)
	if err != nil {
		return nil, err
	}
	if ready {
		if _, err := pr.Call(ctx, proc.LoadReq{Op: "load", Warm: true}, nil); err != nil {
			pr.Close("warm-up failed")
			return nil, err
		}
	}
	return pr, nil
}

// evictOne takes a pooled process out for eviction, to make room for a run that waits:
// a spare first (restores are the rarer need), else a ready process.
func (p *pool) evictOne() *proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, list := range []*[]*proc.Process{&p.spares, &p.ready} {
		if n := len(*list); n > 0 {
			pr := (*list)[n-1]
			*list = (*list)[:n-1]
			return pr
		}
	}
	return nil
}

// drain empties the pool for shutdown.
func (p *pool) drain() []*proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append(p.ready, p.spares...)
	p.ready, p.spares = nil, nil
	return out
}
