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

// TestLimiter drives the limiter's clock: the limit holds within a minute's window,
// the wait it asks for is the rest of that window, and the next window starts afresh.
func TestLimiter(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	l := redisbus.NewLimiter(rdb, prefix, map[string]int{"executions": 3, "messages": 0})
	now := time.Date(2030, 1, 2, 3, 4, 45, 0, time.UTC) // 15 s before the window turns
	redisbus.SetClock(l, func() time.Time { return now })
	alice := sandchat.WithUser(context.Background(), &sandchat.User{ID: 1})
	bob := sandchat.WithUser(context.Background(), &sandchat.User{ID: 2})
	for i := range 3 {
		if err := l.Allow(alice, "executions"); err != nil {
			t.Fatalf("run %d refused: %v", i+1, err)
		}
	}
	now = now.Add(5 * time.Second)
	var e *sandchat.Error
	if err := l.Allow(alice, "executions"); !errors.As(err, &e) || e.Code != sandchat.EBUSY || e.RetryAfter != 10 {
		t.Fatalf("fourth run 10 s before the window turns: %v, want busy with a retry after 10 s", err)
	}
	if err := l.Allow(bob, "executions"); err != nil {
		t.Fatalf("another user is limited by alice's runs: %v", err)
	}
	for range 10 {
		if err := l.Allow(alice, "messages"); err != nil {
			t.Fatalf("a limit of 0 means unlimited: %v", err)
		}
	}
	now = now.Add(10 * time.Second) // the next minute
	for i := range 3 {
		if err := l.Allow(alice, "executions"); err != nil {
			t.Fatalf("run %d of the next minute refused: %v", i+1, err)
		}
	}
	if err := l.Allow(alice, "executions"); !errors.As(err, &e) || e.RetryAfter != 60 {
		t.Fatalf("fourth run at the start of a window: %v, want a retry after 60 s", err)
	}
}
