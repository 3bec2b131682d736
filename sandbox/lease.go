package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandchat/sandchat"
)

// keyLocks queues this node's runs of each session, so only one of them at a time
// polls Redis for the lease. It has a lock of its own: it guards nothing else.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

// keyLock queues one session's runs; it lives only while someone holds or waits for it.
type keyLock struct {
	ch   chan struct{}
	refs int
}

// lock waits for key's turn (or ctx) and returns what ends it.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	done := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// leases serialises the runs of a session: across nodes by the store's lease, fenced,
// and on this node by keyLocks.
type leases struct {
	st    Store
	cfg   *Config // the engine's
	log   *slog.Logger
	locks keyLocks
}

// errLeaseLost ends a run whose lease this node could not keep (Redis unreachable for
// the lease's life, or another node took the session): the fenced save would refuse
// it anyway, and the code should not go on beside another node's run.
var errLeaseLost = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "This server lost hold of the Python session during the run (the session store was unreachable, or another server took the session); the run was stopped and its state not saved."}

// with runs fn holding the session's lease: queued behind other runs of the same
// session on any node, refused when that queue is full. The lease has a fencing token:
// a save made without it is refused, so a node that lost the lease can never overwrite
// a newer state. fn's context ends (cause errLeaseLost) once the lease is lost.
func (l *leases) with(ctx context.Context, key string, fn func(ctx context.Context, token string) error) error {
	token := newToken()
	ok, err := l.st.Admit(ctx, key, token, l.cfg.QueueDepth, l.cfg.MaxTimeout+l.cfg.Grace+time.Minute)
	if err != nil {
		return err
	}
	defer func() { _ = l.st.Leave(context.WithoutCancel(ctx), key, token) }()
	if !ok {
		return &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 2,
			Message: fmt.Sprintf("This session already has %d runs waiting; try again shortly.", l.cfg.QueueDepth)}
	}
	ttl := l.cfg.LeaseTTL
	unlock, err := l.locks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	if err := l.st.Acquire(ctx, key, token, ttl); err != nil {
		return err
	}
	defer func() { _ = l.st.Release(context.WithoutCancel(ctx), key, token) }()
	// The lease's life counts from here, not from when the renewing goroutine first runs
	// (late on a busy machine): what the log says of a lost lease must be its real age.
	held := time.Now()

	lctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), ttl/3)
				asked := time.Now()
				ok, err := l.st.Renew(rctx, key, token, ttl)
				cancel()
				switch {
				case err == nil && ok:
					held = time.Now()
				case err == nil, time.Since(held) >= ttl:
					why := "another holder or expired"
					if err != nil {
						why = err.Error()
					}
					l.log.Warn("session lease lost", "session", key, "reason", why,
						"since_renewed", time.Since(held).Round(time.Millisecond), "renew_took", time.Since(asked).Round(time.Millisecond))
					lost(errLeaseLost)
					return
				}
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	err = fn(lctx, token)
	if errors.Is(context.Cause(lctx), errLeaseLost) && ctx.Err() == nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = errLeaseLost
	}
	return err
}
