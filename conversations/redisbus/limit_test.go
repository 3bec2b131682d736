package redisbus_test

import (
	"context"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations/redisbus"
	"github.com/sandchat/sandchat/migrations/testenv"
)

func TestLimiter(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	l := redisbus.NewLimiter(rdb, prefix, map[string]int{"executions": 3, "messages": 0})
	alice := sandchat.WithUser(context.Background(), &sandchat.User{ID: 1})
	bob := sandchat.WithUser(context.Background(), &sandchat.User{ID: 2})
	for i := range 3 {
		if err := l.Allow(alice, "executions"); err != nil {
			t.Fatalf("run %d refused: %v", i+1, err)
		}
	}
	err := l.Allow(alice, "executions")
	var e *sandchat.Error
	if sandchat.ErrorCode(err) != sandchat.EBUSY {
		t.Fatalf("fourth run: %v, want busy", err)
	}
	if !asError(err, &e) || e.RetryAfter < 1 || e.RetryAfter > 60 {
		t.Fatalf("retry after %+v", e)
	}
	if err := l.Allow(bob, "executions"); err != nil {
		t.Fatalf("another user is limited by alice's runs: %v", err)
	}
	for range 10 {
		if err := l.Allow(alice, "messages"); err != nil {
			t.Fatalf("a limit of 0 means unlimited: %v", err)
		}
	}
}

func asError(err error, target **sandchat.Error) bool {
	e, ok := err.(*sandchat.Error)
	*target = e
	return ok
}
