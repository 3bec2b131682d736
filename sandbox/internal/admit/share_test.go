package admit

import (
	"context"
	"errors"
	"github.com/sandchat/sandchat/migrations/testenv"
	"testing"
	"time"
)

func TestShareOf(t *testing.T) {
	for limit, want := range map[int]int{1: 1, 2: 1, 3: 2, 4: 3, 6: 4, 8: 6, 16: 12, 256: 192} {
		if got := ShareOf(limit); got != want {
			t.Errorf("ShareOf(%d) = %d, want %d", limit, got, want)
		}
	}
}

// TestSharesKeepOwnersApart: an owner past its share waits, in order, for its own slots
// only; another owner is never held up by it; a waiter whose context ends leaves.
func TestSharesKeepOwnersApart(t *testing.T) {
	s := NewShares(2, 4)
	ctx := context.Background()
	for range 2 {
		if err := s.Acquire(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if s.Acquire(ctx, "alice") == nil {
				got <- i
			}
		}()
		testenv.Eventually(t, 10*time.Second, "alice waiting", func() bool { _, w := s.Held("alice"); return w == i+1 })
	}
	if err := s.Acquire(ctx, "bob"); err != nil {
		t.Fatalf("bob waits behind alice: %v", err)
	}
	gone, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- s.Acquire(gone, "alice") }()
	testenv.Eventually(t, 10*time.Second, "alice waiting thrice", func() bool { _, w := s.Held("alice"); return w == 3 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled waiter: %v", err)
	}
	for want := range 2 {
		s.Release("alice")
		if i := <-got; i != want {
			t.Fatalf("alice's waiter %d served, want %d first", i, want)
		}
	}
	if held, waiting := s.Held("alice"); held != 2 || waiting != 0 {
		t.Fatalf("alice holds %d, %d waiting", held, waiting)
	}
	for range 2 {
		s.Release("alice")
	}
	s.Release("bob")
	if len(s.owners) != 0 {
		t.Fatalf("owners left: %v", s.owners)
	}
}
