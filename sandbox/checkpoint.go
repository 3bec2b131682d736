package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"

	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Checkpoints. A run is durable once persist has appended its cell to the session's log
// in Redis (with the files it changed); the heap, whose snapshot and diff cost tens of
// milliseconds, is saved off the answer's path: CheckpointDelay after the session's last
// run (a burst of runs makes one checkpoint), and before its process goes away (eviction,
// shutdown). A session whose process died in between comes back from the last heap plus
// the cells logged since it.

// errHeapTooLarge is a checkpoint put off: the heap would pass the session's state
// limit now. The session stays durable by its log.
var errHeapTooLarge = errors.New("the heap is over the session's state limit")

// expectedCheckpointErr is a checkpoint that could not be taken for an ordinary reason:
// the process died, another run moved the session on, or the heap is over the limit.
// The session's log has every run either way.
func expectedCheckpointErr(err error) bool {
	return errors.Is(err, proc.ErrGone) || errors.Is(err, errFenced) || errors.Is(err, errHeapTooLarge)
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// retireTimeout bounds the checkpoint an evicted session gets before its process goes;
// shutdownCheckpointTimeout, all of them at shutdown together.
const (
	retireTimeout             = 30 * time.Second
	shutdownCheckpointTimeout = 10 * time.Second
)

// scheduleCheckpoint (re)arms lv's checkpoint for CheckpointDelay from now.
func (e *Engine) scheduleCheckpoint(lv *live) {
	e.sess.mu.Lock()
	defer e.sess.mu.Unlock()
	if e.sess.closed || !lv.dirty() {
		return
	}
	if lv.checkpoint != nil {
		lv.checkpoint.Stop()
	}
	lv.checkpoint = time.AfterFunc(e.cfg.CheckpointDelay, func() {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.RestoreTimeout)
		defer cancel()
		err := e.checkpointLive(ctx, lv)
		switch {
		case err == nil, e.ctx.Err() != nil:
		case expectedCheckpointErr(err):
			// The process died or another run moved the session on: its log has it.
			e.log.Debug("sandbox checkpoint skipped", "session", lv.key, "err", err)
		default:
			e.log.Warn("sandbox checkpoint failed; the session stays durable by its log", "session", lv.key, "err", err)
		}
	})
}

// retire checkpoints a session the set forgot (sessions.forgetLocked), then stops its
// process.
func (e *Engine) retire(lv *live, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	e.checkpointForgotten(ctx, lv, "eviction")
	cancel()
	lv.p.Close(why)
	e.sess.retired(lv)
}

// awaitRetired waits (bounded) for an eviction of key in flight, so the run that follows
// restores from the heap it saves.
func (e *Engine) awaitRetired(ctx context.Context, key string) {
	lv := e.sess.retiringOf(key)
	if lv == nil {
		return
	}
	select {
	case <-lv.gone:
	case <-ctx.Done():
	case <-time.After(retireTimeout):
	}
}

// checkpointAll saves the heap of every idle session that needs it, at shutdown; the
// sessions are no longer live, so no run can reach them meanwhile.
func (e *Engine) checkpointAll(lvs []*live) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownCheckpointTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, lv := range lvs {
		wg.Go(func() { e.checkpointForgotten(ctx, lv, "shutdown") })
	}
	wg.Wait()
}

// checkpointForgotten saves the heap of a session taken out of the live set (eviction,
// shutdown), if it is idle and its saved heap lags. No run can reach its process any
// more, so the checkpoint needs no lease: the store still refuses it unless the session
// is at the version this heap holds. A failure is logged: the log has every run.
func (e *Engine) checkpointForgotten(ctx context.Context, lv *live, before string) {
	e.sess.mu.Lock()
	if lv.checkpoint != nil {
		lv.checkpoint.Stop()
	}
	ok, version := !lv.busy && lv.dirty(), lv.version
	e.sess.mu.Unlock()
	if !ok {
		return
	}
	if err := e.checkpoint(ctx, lv, "", version); err != nil && !expectedCheckpointErr(err) {
		e.log.Warn("sandbox checkpoint before "+before+" failed; the session comes back by its log", "session", lv.key, "err", err)
	}
}

// checkpointLive saves a live session's heap if the saved one lags it, holding the
// session's lease so no run (on any node) moves it meanwhile.
func (e *Engine) checkpointLive(ctx context.Context, lv *live) error {
	e.sess.mu.Lock()
	dirty := lv.dirty()
	e.sess.mu.Unlock()
	if !dirty {
		return nil
	}
	return e.withLease(ctx, lv.key, func(token string) error {
		e.sess.mu.Lock()
		if e.sess.m[lv.key] != lv || lv.busy || !lv.dirty() {
			// Gone (an eviction checkpoints it itself), a run has it (it checkpoints
			// again after), or already caught up.
			e.sess.mu.Unlock()
			return nil
		}
		lv.busy = true
		version := lv.version
		e.sess.mu.Unlock()
		defer func() {
			e.sess.mu.Lock()
			lv.busy = false
			e.sess.mu.Unlock()
			lv.p.FreezeSoon()
		}()
		return e.checkpoint(ctx, lv, token, version)
	})
}

// checkpoint takes lv's heap and saves it as the state of version; token is the lease
// held, or "" for a session no run can reach.
func (e *Engine) checkpoint(ctx context.Context, lv *live, token string, version int64) error {
	e.sess.mu.Lock()
	capOf := e.stateCap(lv.stateCap)
	e.sess.mu.Unlock()
	f, err := lv.p.Call(ctx, proc.CheckpointReq{Op: "checkpoint", MaxBytes: capOf}, nil)
	if err != nil {
		return err
	}
	var r proc.CheckpointReply
	if err := json.Unmarshal(f.JSON, &r); err != nil {
		lv.p.Kill("protocol: unreadable checkpoint reply")
		return err
	}
	if err := r.Check(f); err != nil {
		lv.p.Kill("protocol: checkpoint reply refused")
		return fmt.Errorf("checkpoint reply: %w", err)
	}
	// The process sends the changed blocks as they are; the store keeps them XOR-ed
	// with the base (mostly zeros, so they compress well).
	mode, header, delta := modeSnapshot, f.Bytes(r.Header), xorBase(lv.p.Base(), f.Bytes(r.Delta))
	if r.TooLarge {
		// Not now: the log keeps the session, and a later checkpoint (after the user
		// frees memory) may fit.
		return fmt.Errorf("%w: %s", errHeapTooLarge, ptrString(r.SnapshotError))
	}
	if header == nil || delta == nil {
		// User code holds JS objects, or compiled extensions are loaded: the session
		// persists as its cells from now on.
		mode = modeReplay
		if r.SnapshotError != nil {
			e.log.Info("session switches to replay persistence", "session", lv.key, "reason", *r.SnapshotError)
		}
	}
	_, err = e.st.Checkpoint(ctx, lv.key, state.Checkpoint{Token: token, Version: version, Base: lv.base, Build: e.rt.build,
		Mode: mode, Header: header, Delta: delta, Cap: capOf})
	if full := (*state.Full)(nil); errors.As(err, &full) {
		return fmt.Errorf("%w: %v", errHeapTooLarge, full)
	}
	if err != nil {
		return err
	}
	e.sess.mu.Lock()
	if lv.version == version {
		lv.heapVersion, lv.heapStale, lv.mode = version, false, mode
	}
	e.sess.mu.Unlock()
	return nil
}
