package sandchat_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// TestBackoffRetry runs Retry on a fake clock: which attempts are made, what is waited
// between them, and what comes back.
func TestBackoffRetry(t *testing.T) {
	down := sandchat.Unavailable(sandchat.DepPostgres, errors.New("connection refused"))
	bug := errors.New("syntax error")
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		results  []error // of each attempt; past the end, down
		cancelAt int     // cancel the context during this wait (1-based; 0: never)
		attempts int
		waits    []time.Duration
		want     error
	}{
		{"first attempt succeeds", []error{nil}, 0, 1, nil, nil},
		{"succeeds once the dependency is back", []error{down, down, nil}, 0, 3, []time.Duration{100 * ms, 200 * ms}, nil},
		{"an error not worth retrying ends it", []error{down, bug}, 0, 2, []time.Duration{100 * ms}, bug},
		{"the budget ends it with the last error", nil, 0, 6, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second}, down},
		{"a cancelled context ends the wait", nil, 2, 2, []time.Duration{100 * ms, 200 * ms}, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clock := time.Unix(0, 0)
			var waits []time.Duration
			b := sandchat.Backoff{Initial: 100 * ms, Max: time.Second, For: 3 * time.Second,
				Now: func() time.Time { return clock },
				Sleep: func(_ context.Context, d time.Duration) {
					waits = append(waits, d)
					clock = clock.Add(d)
					if len(waits) == tc.cancelAt {
						cancel()
					}
				}}
			attempts := 0
			err := b.Retry(ctx, func() error {
				attempts++
				if attempts <= len(tc.results) {
					return tc.results[attempts-1]
				}
				return down
			}, sandchat.IsUnavailable)
			if err != tc.want || attempts != tc.attempts || !slices.Equal(waits, tc.waits) {
				t.Fatalf("%d attempts, waits %v, error %v; want %d attempts, waits %v, error %v", attempts, waits, err, tc.attempts, tc.waits, tc.want)
			}
		})
	}
}

// TestBackoffRealSleep: without a stand-in clock Retry waits for real, and a context
// that ends cuts the wait short.
func TestBackoffRealSleep(t *testing.T) {
	down := sandchat.Unavailable(sandchat.DepRedis, errors.New("connection refused"))
	attempts := 0
	err := sandchat.Backoff{Initial: time.Millisecond, Max: time.Millisecond, For: time.Hour}.Retry(context.Background(), func() error {
		if attempts++; attempts < 3 {
			return down
		}
		return nil
	}, sandchat.IsUnavailable)
	if err != nil || attempts != 3 {
		t.Fatalf("%d attempts, %v; want success on the third", attempts, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	attempts = 0
	err = sandchat.Backoff{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour}.Retry(ctx, func() error {
		attempts++
		time.AfterFunc(time.Millisecond, cancel) // while Retry waits its hour
		return down
	}, sandchat.IsUnavailable)
	if err != down || attempts != 1 {
		t.Fatalf("%d attempts, %v; want one attempt and its error", attempts, err)
	}
}
