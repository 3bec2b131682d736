package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestKeyLocks: one holder per key at a time, keys independent, a waiter that gives up
// leaves nothing behind, and the map empties once nobody holds or waits.
func TestKeyLocks(t *testing.T) {
	t.Parallel()
	var k keyLocks
	ctx := context.Background()
	unlockA, err := k.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := k.lock(ctx, "b")
	if err != nil {
		t.Fatal("another key waited for the first:", err)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := k.lock(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder of a: %v", err)
	}

	got := make(chan func())
	go func() {
		u, err := k.lock(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("the waiter got a while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	(<-got)()
	unlockB()

	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) != 0 {
		t.Fatalf("%d keys left with nobody holding or waiting", len(k.m))
	}
}
