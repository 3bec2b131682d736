package admit

import (
	"context"
	"sync"
)

// Shares bounds how many slots of a node one owner (a user) holds at once: its share,
// the node's bound less a reserve, so however many long runs one user starts, another
// user's first run finds a slot. An owner past its share waits, first come first
// served among its own callers, until one of its slots is given back or its context
// ends; other owners never wait behind it. It has one lock and no other state.
type Shares struct {
	share, maxQueue int

	mu     sync.Mutex
	owners map[string]*owner // only owners holding or waiting for a slot
}

type owner struct {
	held  int
	queue []*waiter
}

// NewShares gives each owner at most share slots and queues at most maxQueue of its
// callers beyond them.
func NewShares(share, maxQueue int) *Shares {
	return &Shares{share: max(share, 1), maxQueue: max(maxQueue, 0), owners: map[string]*owner{}}
}

// ShareOf is the share of a node of limit slots: all but a reserve of a quarter of them
// (at least one) kept for other owners.
func ShareOf(limit int) int {
	reserve := max((limit+3)/4, 1)
	return max(limit-reserve, 1)
}

// Share is how many slots one owner may hold.
func (s *Shares) Share() int { return s.share }

// Acquire takes one of the owner's slots, waiting its turn until ctx ends. It returns
// ErrQueueFull when the owner already has maxQueue callers waiting, and ctx's error when
// the wait ran out. Release gives the slot back.
func (s *Shares) Acquire(ctx context.Context, who string) error {
	s.mu.Lock()
	o := s.owners[who]
	if o == nil {
		o = &owner{}
		s.owners[who] = o
	}
	if o.held < s.share && len(o.queue) == 0 {
		o.held++
		s.mu.Unlock()
		return nil
	}
	if len(o.queue) >= s.maxQueue {
		s.mu.Unlock()
		return ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	o.queue = append(o.queue, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		return nil // the slot came as the wait ended: it is the caller's now
	}
	for i, q := range o.queue {
		if q == w {
			o.queue = append(o.queue[:i], o.queue[i+1:]...)
			break
		}
	}
	s.forgetLocked(who, o)
	return ctx.Err()
}

// Release gives one of the owner's slots back: to its oldest waiter, or to the free count.
func (s *Shares) Release(who string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owners[who]
	if o == nil {
		return
	}
	if len(o.queue) > 0 {
		w := o.queue[0]
		o.queue = o.queue[1:]
		w.granted = true
		close(w.ready)
		return
	}
	if o.held > 0 {
		o.held--
	}
	s.forgetLocked(who, o)
}

// Held is how many slots the owner holds, and how many of its callers wait.
func (s *Shares) Held(who string) (held, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.owners[who]; o != nil {
		return o.held, len(o.queue)
	}
	return 0, 0
}

// Waiting is how many callers of all owners wait.
func (s *Shares) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.owners {
		n += len(o.queue)
	}
	return n
}

// forgetLocked drops an owner that holds and waits for nothing; s.mu is held.
func (s *Shares) forgetLocked(who string, o *owner) {
	if o.held == 0 && len(o.queue) == 0 {
		delete(s.owners, who)
	}
}
