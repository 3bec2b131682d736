package sandbox

import (
	"context"
	"github.com/sandchat/sandchat/migrations/testenv"
	"syscall"
	"testing"
	"time"
)

// TestLiveBound: with MaxLive 1, a session adopted while the other was busy (its
// checkpoint under way, or a run) makes two live for a moment; once the other is idle
// again the bound holds, without waiting for the idle timeout. Two conversations that
// alternate just under the checkpoint delay used to keep two processes live for good.
func TestLiveBound(t *testing.T) {
	t.Parallel()
	t.Run("a checkpoint ends while another session runs", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.MaxLive, c.CheckpointDelay = 1, 200*time.Millisecond })
		mustSucceed(t, e, "a", "x = 1")
		a := liveOf(t, e, "a")
		// The checkpoint starts, and cannot end while a's process is stopped.
		signalAll(t, e, "a", syscall.SIGSTOP)
		stopped := true
		defer func() {
			if stopped {
				signalAll(t, e, "a", syscall.SIGCONT)
			}
		}()
		testenv.Eventually(t, 30*time.Second, "a busy", func() bool { _, idle := a.Idle(); return !idle })

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		go func() {
			_, err := e.Execute(ctx, "b", Request{Code: "import time\ntime.sleep(60)", Timeout: 90 * time.Second})
			ran <- err
		}()
		testenv.Eventually(t, 60*time.Second, "b adopted", func() bool { return e.sess.process("b") != nil })
		if n := e.sess.count(); n != 2 {
			t.Fatalf("%d live sessions while a's checkpoint holds it, want 2", n)
		}
		signalAll(t, e, "a", syscall.SIGCONT)
		stopped = false
		// a's checkpoint ends while b still runs: a is the one idle, and goes.
		testenv.Eventually(t, 30*time.Second, "a evicted, b kept", func() bool { return e.sess.count() == 1 && e.sess.process("a") == nil })
		select {
		case err := <-ran:
			t.Fatalf("b's run ended before the bound held: %v", err)
		default:
		}
		cancel()
		<-ran
	})

	t.Run("a run ends while another session was adopted", func(t *testing.T) {
		e, _ := newEngine(t, func(c *Config) { c.MaxLive, c.CheckpointDelay = 1, time.Hour })
		mustSucceed(t, e, "a", "x = 1")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		go func() {
			_, err := e.Execute(ctx, "a", Request{Code: "import time\ntime.sleep(60)", Timeout: 90 * time.Second})
			ran <- err
		}()
		a := liveOf(t, e, "a")
		testenv.Eventually(t, 30*time.Second, "a busy", func() bool { _, idle := a.Idle(); return !idle })
		mustSucceed(t, e, "b", "y = 1")
		cancel() // a's run is stopped: it is idle again
		<-ran
		testenv.Eventually(t, 30*time.Second, "one live", func() bool { return e.sess.count() == 1 })
	})
}

// signalAll sends sig to every task of key's live process.
func signalAll(t *testing.T, e *Engine, key string, sig syscall.Signal) {
	t.Helper()
	for _, pid := range liveOf(t, e, key).Process().Tasks() {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Logf("signal %d: %v", pid, err)
		}
	}
}
