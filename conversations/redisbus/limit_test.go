package redisbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations/redisbus"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestLimiter drives the limiter's clock: the limit holds over any minute, the turn of
// the clock's minute included (a fixed window let as many again through a second
// later), the wait it asks for is until the oldest action counted is a minute old, and
// every answer tells the request where the limit stands.
func TestLimiter(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	l := redisbus.NewLimiter(rdb, prefix, map[string]int{"executions": 3, "messages": 0})
	start := time.Date(2030, 1, 2, 3, 4, 59, 0, time.UTC) // a second before the clock's minute turns
	now := start
	redisbus.SetClock(l, func() time.Time { return now })
	bob := sandchat.WithUser(context.Background(), &sandchat.User{ID: 2})
	allow := func(user int64) (sandchat.RateLimit, error) {
		ctx, report := sandchat.WithRateReport(sandchat.WithUser(context.Background(), &sandchat.User{ID: user}))
		err := l.Allow(ctx, "executions")
		rl, ok := report.Tightest()
		if !ok {
			t.Fatalf("at %s: the limiter noted nothing for the request", now.Format("15:04:05.000"))
		}
		return rl, err
	}
	for i := range 3 {
		rl, err := allow(1)
		if err != nil {
			t.Fatalf("run %d refused: %v", i+1, err)
		}
		if rl.Limit != 3 || rl.Window != time.Minute || rl.Remaining != 2-i || rl.Reset != time.Minute {
			t.Fatalf("run %d: %+v, want 3 a minute, %d remaining, reset in 60 s", i+1, rl, 2-i)
		}
	}
	var e *sandchat.Error
	for _, at := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 30 * time.Second, 59 * time.Second} {
		now = start.Add(at)
		rl, err := allow(1)
		want := int((time.Minute - at + time.Second - 1) / time.Second)
		if !errors.As(err, &e) || e.Code != sandchat.EBUSY || e.RetryAfter != want {
			t.Fatalf("a fourth run %s after the first three (the clock's minute turned at 1 s): %v, want busy with a retry after %d s", at, err, want)
		}
		if rl.Remaining != 0 || rl.Reset != time.Minute-at {
			t.Fatalf("refused %s after: %+v, want none remaining and a reset in %s", at, rl, time.Minute-at)
		}
	}
	if err := l.Allow(bob, "executions"); err != nil {
		t.Fatalf("another user is limited by alice's runs: %v", err)
	}
	for range 10 {
		if err := l.Allow(bob, "messages"); err != nil {
			t.Fatalf("a limit of 0 means unlimited: %v", err)
		}
	}
	now = start.Add(time.Minute) // the first three are a minute old
	for i := range 3 {
		if _, err := allow(1); err != nil {
			t.Fatalf("run %d a minute later refused: %v", i+1, err)
		}
	}
	if _, err := allow(1); !errors.As(err, &e) || e.RetryAfter != 60 {
		t.Fatalf("a fourth run at once: %v, want a retry after 60 s", err)
	}
}
