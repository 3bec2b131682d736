package sandchat

import (
	"context"
	"time"
)

// Backoff says how an operation that failed for a reason that may pass (a database
// restarting) is tried again: first after Initial, then after twice the last wait, at
// most Max, for as long as the next attempt would start within For of the first.
type Backoff struct {
	Initial, Max, For time.Duration
	// Now and Sleep stand in for the clock in tests; nil means the real one. Sleep
	// returns early when ctx is done.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration)
}

// Retry calls try until it succeeds, fails with an error retryable refuses, ctx is
// done, or the budget For is spent, and returns try's last error (nil on success).
// ctx only bounds the waiting: try gets its own context from its caller.
func (b Backoff) Retry(ctx context.Context, try func() error, retryable func(error) bool) error {
	now, sleep := b.Now, b.Sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	deadline := now().Add(b.For)
	delay := b.Initial
	for {
		err := try()
		if err == nil || !retryable(err) || ctx.Err() != nil || now().Add(delay).After(deadline) {
			return err
		}
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return err
		}
		delay = min(2*delay, b.Max)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// IsUnavailable reports whether err is an EUNAVAILABLE error: a dependency that is
// away for now, worth trying again.
func IsUnavailable(err error) bool { return ErrorCode(err) == EUNAVAILABLE }
