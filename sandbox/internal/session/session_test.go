package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// TestLiveGuardsItself: a run's reply, a save refused for room, the checkpoint timer and
// the readers of a session's state reach it from goroutines of their own, as they do in
// the engine. Under -race (make test) this fails when one of them touches its fields
// without its lock.
func TestLiveGuardsItself(t *testing.T) {
	lv := newSession("k", nil, restored{mode: modeSnapshot, version: 1})
	const n = 2000
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Go(func() {
		<-start
		for i := range n {
			lv.ran(&proc.RunReply{Status: StatusError, Deleted: []string{"gone.txt"}}, proc.Frame{}, map[string]string{"a.csv": "1"})
			lv.taint()
			lv.saveRequest("token", "build", nil, "x = 1", Budget{})
			lv.saved(int64(i) + 2)
		}
	})
	wg.Go(func() {
		<-start
		for range n {
			if version, _, ok := lv.beginCheckpoint(); ok {
				lv.checkpointed(version, modeSnapshot)
				lv.endCheckpoint()
			}
			lv.checkpointDue()
		}
	})
	wg.Go(func() {
		<-start
		for range n {
			lv.armCheckpoint(time.Hour, func() {})
			lv.Info()
			lv.DataHeld()
			lv.install(nil)
			lv.installed()
			lv.Idle()
		}
	})
	close(start)
	wg.Wait()
	if info := lv.Info(); info.Version != n+1 {
		t.Fatalf("version %d after %d saves", info.Version, n)
	}
	lv.ran(&proc.RunReply{Status: StatusError}, proc.Frame{}, nil)
	if _, _, due := lv.stopCheckpoint(context.Background()); due {
		t.Fatalf("a session whose last run failed is checkpointed")
	}
}

// TestLetGoWaitsForItsCheckpoint: a session let go of (evicted, shut down) while its
// delayed checkpoint is in flight waits for that checkpoint before its process is
// stopped, since one stopped under it saves nothing and the next restore would replay
// what the heap held; once it ended, no other checkpoint is due.
func TestLetGoWaitsForItsCheckpoint(t *testing.T) {
	lv := newSession("k", nil, restored{mode: modeSnapshot, version: 1})
	lv.Release()
	version, _, ok := lv.beginCheckpoint()
	if !ok {
		t.Fatal("no checkpoint due for a session whose heap was never saved")
	}
	stopped := make(chan bool, 1)
	go func() {
		_, _, due := lv.stopCheckpoint(context.Background())
		stopped <- due
	}()
	select {
	case <-stopped:
		t.Fatal("the session was let go of while its checkpoint was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	lv.checkpointed(version, modeSnapshot)
	lv.endCheckpoint()
	if due := <-stopped; due {
		t.Fatal("a last checkpoint is due after the one in flight saved the heap")
	}
}
