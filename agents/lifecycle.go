package agents

import (
	"context"
	"time"
)

// Run keeps this node's running turns alive in the store, stops those it lost, and fails
// the turns of nodes that died, until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	beat := min(time.Second, r.staleAfter/3, r.nodeTTL/3)
	heartbeat := time.NewTicker(beat)
	defer heartbeat.Stop()
	r.beat(ctx)
	r.sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			r.beat(ctx)
			r.sweep(ctx)
		}
	}
}

// beat renews this node's liveness key and its turns; a turn the store says this node
// no longer runs is cancelled at once, so its code is interrupted.
func (r *Runner) beat(ctx context.Context) {
	if r.nodes != nil {
		if err := r.nodes.Beat(ctx, r.nodeID, r.nodeTTL); err != nil && ctx.Err() == nil {
			r.log.Debug("node heartbeat", "err", err)
		}
	}
	r.mu.Lock()
	ids := make([]int64, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	lost, cancelled, err := r.store.Heartbeat(ctx, r.nodeID, ids)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("turn heartbeat", "err", err)
	}
	r.mu.Lock()
	for _, id := range lost {
		if t := r.running[id]; t != nil {
			r.log.Warn("turn ended elsewhere; stopping it here", "turn_id", id)
			t.cancel(errFenced)
		}
	}
	for _, id := range cancelled {
		if t := r.running[id]; t != nil {
			t.cancel(errCancelled)
		}
	}
	r.mu.Unlock()
}

func (r *Runner) sweep(ctx context.Context) {
	var dead []string
	if r.nodes != nil {
		quiet, err := r.store.QuietNodes(ctx, r.quietAfter)
		if err == nil && len(quiet) > 0 {
			// Without Redis nobody is known dead: only the stale limit applies.
			if alive, err := r.nodes.Alive(ctx, quiet); err == nil {
				for _, n := range quiet {
					if !alive[n] && n != r.nodeID {
						dead = append(dead, n)
					}
				}
			}
		}
	}
	evs, err := r.store.FailStaleTurns(ctx, r.staleAfter, r.quietAfter, dead,
		"the server running this turn stopped (crash, kill or restart); send the message again")
	if err != nil && ctx.Err() == nil {
		r.log.Warn("fail stale turns", "err", err)
	}
	for _, ev := range evs {
		r.log.Warn("failed a turn left running by a stopped server", "conversation_id", ev.ConversationID)
		r.publish(ctx, ev)
	}
}

// Shutdown stops taking new turns, lets running ones finish until ctx ends, then
// cancels the rest, which are marked failed.
func (r *Runner) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.finished.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	r.mu.Lock()
	for _, t := range r.running {
		t.cancel(errShutdown)
	}
	r.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		r.abandoned.Store(true)
	}
}
