package admit

import (
	"context"
	"errors"
	"github.com/sandchat/sandchat/migrations/testenv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	t.Parallel()
	t.Run("never more than the limit", func(t *testing.T) {
		t.Parallel()
		g := New(3, 100)
		var in, most atomic.Int32
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if err := g.Acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				n := in.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				in.Add(-1)
				g.Release()
			})
		}
		wg.Wait()
		if m := most.Load(); m != 3 {
			t.Fatalf("at most %d held at once, want exactly the limit 3", m)
		}
		if held, waiting, _ := g.Stats(); held != 0 || waiting != 0 {
			t.Fatalf("after all released: held %d, waiting %d", held, waiting)
		}
	})
	t.Run("first come first served", func(t *testing.T) {
		t.Parallel()
		g := New(1, 10)
		if err := g.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				if err := g.Acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				g.Release()
			})
			testenv.Eventually(t, 5*time.Second, "a waiter more", func() bool { return g.Waiting() == i+1 })
		}
		// A newcomer that may wait never overtakes the queue.
		if g.TryAcquire() {
			t.Fatal("TryAcquire took a slot while callers wait")
		}
		g.Release()
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("served in order %v, want 0..4", order)
			}
		}
	})
	t.Run("queue bound refuses at once", func(t *testing.T) {
		t.Parallel()
		g := New(1, 1)
		_ = g.Acquire(context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = g.Acquire(ctx) }()
		testenv.Eventually(t, 5*time.Second, "one waiter", func() bool { return g.Waiting() == 1 })
		if err := g.Acquire(context.Background()); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("third caller: %v, want ErrQueueFull", err)
		}
	})
	t.Run("deadline leaves the queue", func(t *testing.T) {
		t.Parallel()
		g := New(1, 5)
		_ = g.Acquire(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := g.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter past its deadline: %v", err)
		}
		if g.Waiting() != 0 {
			t.Fatal("a waiter that gave up is still queued")
		}
		g.Release()
		if held, _, _ := g.Stats(); held != 0 {
			t.Fatalf("held %d after the only holder released", held)
		}
	})
	t.Run("pressure is signalled for waiters", func(t *testing.T) {
		t.Parallel()
		g := New(1, 5)
		_ = g.Acquire(context.Background())
		got := make(chan error, 1)
		go func() { got <- g.Acquire(context.Background()) }()
		// The owner hears of the waiter and frees the holder's slot, which passes to it.
		<-g.Pressure()
		if g.Waiting() != 1 {
			t.Fatalf("%d waiting when the pressure came, want 1", g.Waiting())
		}
		g.Release()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if held, _, _ := g.Stats(); held != 1 {
			t.Fatalf("held %d, want 1: the freed slot passed to the waiter", held)
		}
		select {
		case <-g.Pressure():
			t.Fatal("pressure signalled with nobody waiting since")
		default:
		}
	})
}
