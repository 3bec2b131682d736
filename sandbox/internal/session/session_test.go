package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// idleSession is a session as a run that brought it back leaves it: idle, at version 1.
func idleSession() *Session {
	s := newSession(&Env{}, "k", nil, restored{mode: modeSnapshot, version: 1})
	s.hand(&opened{})
	s.mu.Lock()
	s.toLocked(idle)
	s.mu.Unlock()
	return s
}

// TestSessionGuardsItself: a run's reply, a save refused for room, the checkpoint timer and
// the readers of a session's state reach it from goroutines of their own, as they do in
// the engine. Under -race (make test) this fails when one of them touches its fields
// without its lock.
func TestSessionGuardsItself(t *testing.T) {
	s := idleSession()
	const n = 2000
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Go(func() {
		<-start
		for i := range n {
			s.ran(&proc.RunReply{Status: StatusError, Deleted: []string{"gone.txt"}}, proc.Frame{}, map[string]string{"a.csv": "1"})
			s.taint()
			s.saveRequest("token", "build", nil, "x = 1", Budget{})
			s.saved(int64(i) + 2)
		}
	})
	wg.Go(func() {
		<-start
		for range n {
			if version, _, ok := s.beginCheckpoint(); ok {
				s.checkpointed(version, modeSnapshot)
				s.endCheckpoint()
			}
			s.checkpointDue()
		}
	})
	wg.Go(func() {
		<-start
		for range n {
			s.armCheckpoint(time.Hour, func() {})
			s.info()
			s.dataHeld()
			s.install(nil)
			s.installed()
			s.Idle()
		}
	})
	close(start)
	wg.Wait()
	if info := s.info(); info.Version != n+1 {
		t.Fatalf("version %d after %d saves", info.Version, n)
	}
	s.ran(&proc.RunReply{Status: StatusError}, proc.Frame{}, nil)
	if _, _, due := s.retire(context.Background()); due {
		t.Fatalf("a session whose last run failed is checkpointed")
	}
}

// TestRetireWaitsForItsCheckpoint: a session let go of (evicted, shut down) while its
// delayed checkpoint is in flight waits for that checkpoint before its process is
// stopped, since one stopped under it saves nothing and the next restore would replay
// what the heap held; once it ended, no other checkpoint is due.
func TestRetireWaitsForItsCheckpoint(t *testing.T) {
	s := idleSession()
	version, _, ok := s.beginCheckpoint()
	if !ok {
		t.Fatal("no checkpoint due for a session whose heap was never saved")
	}
	stopped := make(chan bool, 1)
	go func() {
		_, _, due := s.retire(context.Background())
		stopped <- due
	}()
	select {
	case <-stopped:
		t.Fatal("the session was let go of while its checkpoint was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	s.checkpointed(version, modeSnapshot)
	s.endCheckpoint()
	if due := <-stopped; due {
		t.Fatal("a last checkpoint is due after the one in flight saved the heap")
	}
	if _, _, ok := s.beginCheckpoint(); ok {
		t.Fatal("a retiring session began a checkpoint")
	}
}

// TestPhases: each verb takes the session only from the phases it may: a run from idle
// (and only at its version), a checkpoint from idle, an eviction from idle; nothing
// brings a retiring or gone session back.
func TestPhases(t *testing.T) {
	s := idleSession()
	if !s.Evict() {
		t.Fatal("an idle session could not be evicted")
	}
	if s.Evict() {
		t.Fatal("a retiring session was evicted again")
	}
	s.mu.Lock()
	s.tainted = false
	s.mu.Unlock()
	if _, _, ok := s.beginCheckpoint(); ok {
		t.Fatal("a checkpoint began on a retiring session")
	}
	s.endCheckpoint()
	if _, idle := s.Idle(); idle {
		t.Fatal("a checkpoint's end made a retiring session idle")
	}
	s.stopped()
	s.mu.Lock()
	p := s.phase
	s.mu.Unlock()
	if p != gone {
		t.Fatalf("phase %d after stopped, want gone", p)
	}
}
