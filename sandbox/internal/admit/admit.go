// Package admit bounds a scarce resource of a node, such as its session processes, with
// a fair queue: callers get a slot in the order they asked, within their deadline, and a
// queue longer than its bound refuses at once. It has one lock and no other state.
package admit

import (
	"context"
	"errors"
	"sync"
)

var (
	// ErrQueueFull is returned at once when the queue already holds its bound.
	ErrQueueFull = errors.New("admission queue full")
)

// Gate hands out at most Limit slots. Waiters are served first come, first served; a
// slot released while some wait passes straight to the oldest, so a stream of newcomers
// calling TryAcquire can never overtake them.
type Gate struct {
	limit, maxQueue int
	// pressure has a signal each time a caller starts waiting (one at most pending): the
	// owner may free slots (evict something idle) for those that wait.
	pressure chan struct{}

	mu    sync.Mutex
	held  int
	queue []*waiter
}

type waiter struct {
	ready   chan struct{}
	granted bool // set under mu when a slot passed to it
}

// New returns a gate of limit slots and a queue of at most maxQueue waiters.
func New(limit, maxQueue int) *Gate {
	return &Gate{limit: max(limit, 1), maxQueue: max(maxQueue, 0), pressure: make(chan struct{}, 1)}
}

// Pressure has a value each time a caller starts waiting, for the gate's owner to free
// slots for those that wait (Waiting says how many); signals that come before the owner
// reads one are one.
func (g *Gate) Pressure() <-chan struct{} { return g.pressure }

// TryAcquire takes a slot only if one is free and nobody waits: for work that can be
// put off (refilling a pool), never ahead of a waiting caller.
func (g *Gate) TryAcquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held < g.limit && len(g.queue) == 0 {
		g.held++
		return true
	}
	return false
}

// Acquire takes a slot, waiting its turn until ctx ends. It returns ErrQueueFull when
// the queue holds its bound, and ctx's error when the wait ran out.
func (g *Gate) Acquire(ctx context.Context) error {
	g.mu.Lock()
	if g.held < g.limit && len(g.queue) == 0 {
		g.held++
		g.mu.Unlock()
		return nil
	}
	if len(g.queue) >= g.maxQueue {
		g.mu.Unlock()
		return ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.mu.Unlock()
	select {
	case g.pressure <- struct{}{}:
	default:
	}
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		// The slot came as the wait ended: it is the caller's now.
		return nil
	}
	for i, q := range g.queue {
		if q == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// Release gives a slot back: to the oldest waiter, or to the free count.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 {
		w := g.queue[0]
		g.queue = g.queue[1:]
		w.granted = true
		close(w.ready)
		return
	}
	if g.held > 0 {
		g.held--
	}
}

// Stats reports the slots held, the callers waiting and the bound.
func (g *Gate) Stats() (held, waiting, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, len(g.queue), g.limit
}

// Waiting is how many callers wait for a slot.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
