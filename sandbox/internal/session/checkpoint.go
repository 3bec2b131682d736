package session

import (
	"cmp"
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

// ErrHeapTooLarge is a checkpoint put off: the heap would pass the session's state
// limit now. The session stays durable by its log.
var ErrHeapTooLarge = errors.New("the heap is over the session's state limit")

// expectedCheckpointErr is a checkpoint that could not be taken for an ordinary reason:
// the process died, another run moved the session on, or the heap is over the limit.
// The session's log has every run either way.
func expectedCheckpointErr(err error) bool {
	return errors.Is(err, proc.ErrGone) || errors.Is(err, errFenced) || errors.Is(err, ErrHeapTooLarge)
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

// schedule (re)arms lv's checkpoint for CheckpointDelay from now.
func (env *Env) schedule(lv *Session) {
	lv.armCheckpoint(env.Limits.CheckpointDelay, func() {
		ctx, cancel := context.WithTimeout(env.Ctx, env.Limits.RestoreTimeout)
		defer cancel()
		err := env.Checkpoint(ctx, lv)
		switch {
		case err == nil, env.Ctx.Err() != nil:
		case expectedCheckpointErr(err):
			// The process died or another run moved the session on: its log has it.
			env.Log.Debug("sandbox checkpoint skipped", "session", lv.Key(), "err", err)
		default:
			env.Log.Warn("sandbox checkpoint failed; the session stays durable by its log", "session", lv.Key(), "err", err)
		}
	})
}

// Retire checkpoints a session the node's set forgot (an eviction), then stops its
// process.
func (env *Env) Retire(lv *Session, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	env.forgotten(ctx, lv, "eviction")
	cancel()
	lv.Process().Close(why)
	env.Node.Retired(lv)
}

// awaitRetired waits (bounded) for an eviction of key in flight, so the run that follows
// restores from the heap it saves.
func (env *Env) awaitRetired(ctx context.Context, key string) {
	lv := env.Node.Retiring(key)
	if lv == nil {
		return
	}
	select {
	case <-lv.Retiring():
	case <-ctx.Done():
	case <-time.After(retireTimeout):
	}
}

// RetireAll saves the heap of every idle session that needs it, at shutdown; the
// sessions are no longer live, so no run can reach them meanwhile.
func (env *Env) RetireAll(lvs []*Session) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownCheckpointTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, lv := range lvs {
		wg.Go(func() { env.forgotten(ctx, lv, "shutdown") })
	}
	wg.Wait()
}

// forgotten saves the heap of a session taken out of the live set (eviction,
// shutdown), if it is idle and its saved heap lags. No run can reach its process any
// more, so the checkpoint needs no lease: the store still refuses it unless the session
// is at the version this heap holds. A failure is logged: the log has every run.
func (env *Env) forgotten(ctx context.Context, lv *Session, before string) {
	version, budget, due := lv.stopCheckpoint(ctx)
	if !due {
		return
	}
	err := env.save(ctx, lv, "", version, budget)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The call's deadline stops the process (ErrGone): said here, or a machine too
		// busy to save heaps in time would bring sessions back by replay without a word.
		env.Log.Warn("sandbox checkpoint before "+before+" did not finish in time; the session comes back by its log", "session", lv.Key(), "err", context.Cause(ctx))
	case !expectedCheckpointErr(err):
		env.Log.Warn("sandbox checkpoint before "+before+" failed; the session comes back by its log", "session", lv.Key(), "err", err)
	}
}

// Checkpoint saves a live session's heap if the saved one lags it, holding the
// session's lease so no run (on any node) moves it meanwhile.
func (env *Env) Checkpoint(ctx context.Context, lv *Session) error {
	if !lv.checkpointDue() {
		return nil
	}
	// A checkpoint whose lease is lost is refused by the store's fence: it goes on with
	// ctx, not the lease's, so its process is not killed for it.
	return env.Lease(ctx, lv.Key(), func(_ context.Context, token string) error {
		version, budget, ok := lv.beginCheckpoint()
		if !ok {
			return nil
		}
		defer func() {
			lv.endCheckpoint()
			lv.Process().FreezeSoon()
			env.Node.Idle()
		}()
		return env.save(ctx, lv, token, version, budget)
	})
}

// save takes lv's heap and saves it as the state of version, within what budget (its
// last run's) leaves when it is written; token is the lease held, or "" for a session no
// run can reach.
func (env *Env) save(ctx context.Context, lv *Session, token string, version int64, budget Budget) (err error) {
	t0 := time.Now()
	defer func() { env.Obs.Checkpointed(time.Since(t0), err) }()
	p := lv.Process()
	// The heap is compressed as it arrives (heapstream.go): the server never holds it
	// whole, and keeps at most the state limit of it. The budget is reserved once it is
	// here, only for as long as it is written.
	capOf := env.Limits.MaxStateBytes
	in := &heapIn{base: p.Base(), limit: capOf}
	f, err := p.CallStream(ctx, proc.CheckpointReq{Op: "checkpoint", MaxBytes: capOf}, nil, in.receive)
	if err != nil {
		return err
	}
	var r proc.CheckpointReply
	if err := json.Unmarshal(f.JSON, &r); err != nil {
		p.Kill("protocol: unreadable checkpoint reply")
		return err
	}
	if (r.Header == nil) != (r.Delta == nil) || in.err != nil {
		p.Kill("protocol: checkpoint reply refused")
		return fmt.Errorf("checkpoint reply: %w", cmp.Or(in.err, errors.New("snapshot header without delta")))
	}
	if in.over {
		return fmt.Errorf("%w: the heap's delta compresses to more than the session's %.1f MiB state limit", ErrHeapTooLarge, float64(capOf)/(1<<20))
	}
	mode, header, delta := modeSnapshot, in.header, in.delta
	if r.Header == nil {
		header, delta = nil, nil
	}
	if r.TooLarge {
		// Not now: the log keeps the session, and a later checkpoint (after the user
		// frees memory) may fit.
		return fmt.Errorf("%w: %s", ErrHeapTooLarge, ptrString(r.SnapshotError))
	}
	if header == nil || delta == nil {
		// User code holds JS objects, or compiled extensions are loaded: the session
		// persists as its cells from now on.
		mode = modeReplay
		if r.SnapshotError != nil {
			env.Log.Info("session switches to replay persistence", "session", lv.Key(), "reason", *r.SnapshotError)
		}
	}
	err = env.Limits.reserved(ctx, budget, func(stateCap int64) error {
		_, err := env.Store.Checkpoint(ctx, lv.Key(), state.Checkpoint{Token: token, Version: version, Base: lv.baseHash(), Build: env.Build,
			Mode: mode, Header: header, Delta: delta, Cap: stateCap})
		return err
	})
	if full := (*state.Full)(nil); errors.As(err, &full) {
		return fmt.Errorf("%w: %v", ErrHeapTooLarge, full)
	}
	if err != nil {
		return err
	}
	lv.checkpointed(version, mode)
	return nil
}
