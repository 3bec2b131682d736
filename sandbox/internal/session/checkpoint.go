package session

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// retireTimeout bounds the wait of a run for an eviction of its session in flight (the
// checkpoint an evicted session gets before its process goes).
const retireTimeout = 30 * time.Second

// schedule (re)arms the session's checkpoint for CheckpointDelay from now.
func (s *Session) schedule() {
	s.armCheckpoint(s.env.Limits.CheckpointDelay, func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.env.Limits.RestoreTimeout)
		defer cancel()
		err := s.Checkpoint(ctx)
		switch {
		case err == nil:
		case expectedCheckpointErr(err):
			// The process died or another run moved the session on: its log has it.
			s.env.Log.Debug("sandbox checkpoint skipped", "session", s.key, "err", err)
		default:
			s.env.Log.Warn("sandbox checkpoint failed; the session stays durable by its log", "session", s.key, "err", err)
		}
	})
}

// Retire ends the session as the node lets go of it (evicted, shut down): once a
// checkpoint in flight has ended, its heap is saved if it was idle and its saved heap
// lags, then its process stops (why says why) and it is gone. ctx bounds the wait and
// the checkpoint. No run can reach its process any more, so the checkpoint needs no
// lease: the store still refuses it unless the session is at the version this heap
// holds. A failure is logged: the log has every run.
func (s *Session) Retire(ctx context.Context, why string) {
	defer s.stopped()
	defer s.p.Close(why)
	version, budget, due := s.retire(ctx)
	if !due {
		return
	}
	err := s.save(ctx, "", version, budget)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The call's deadline stops the process (ErrGone): said here, or a machine too
		// busy to save heaps in time would bring sessions back by replay without a word.
		s.env.Log.Warn("sandbox checkpoint before the process stops did not finish in time; the session comes back by its log", "session", s.key, "why", why, "err", context.Cause(ctx))
	case !expectedCheckpointErr(err):
		s.env.Log.Warn("sandbox checkpoint before the process stops failed; the session comes back by its log", "session", s.key, "why", why, "err", err)
	}
}

// Checkpoint saves the session's heap if the saved one lags it, holding its lease so no
// run (on any node) moves it meanwhile; nothing when a run or the node has it.
func (s *Session) Checkpoint(ctx context.Context) error {
	if !s.checkpointDue() {
		return nil
	}
	// A checkpoint whose lease is lost is refused by the store's fence: it goes on with
	// ctx, not the lease's, so its process is not killed for it.
	return s.env.Lease(ctx, s.key, func(_ context.Context, token string) error {
		version, budget, ok := s.beginCheckpoint()
		if !ok {
			return nil
		}
		defer func() {
			s.endCheckpoint()
			s.p.FreezeSoon()
		}()
		return s.save(ctx, token, version, budget)
	})
}

// save takes the session's heap and saves it as the state of version, within what
// budget (its last run's) leaves when it is written; token is the lease held, or "" for
// a session no run can reach.
func (s *Session) save(ctx context.Context, token string, version int64, budget Budget) (err error) {
	env := s.env
	t0 := time.Now()
	ctx, span := env.span(ctx, "sandbox checkpoint", s.key)
	defer func() {
		env.Obs.Checkpointed(time.Since(t0), err)
		endSpan(span, err)
	}()
	p := s.p
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
			env.Log.Info("session switches to replay persistence", "session", s.key, "reason", *r.SnapshotError)
		}
	}
	err = env.Limits.reserved(ctx, budget, func(stateCap int64) error {
		_, err := env.Store.Checkpoint(ctx, s.key, state.Checkpoint{Token: token, Version: version, Base: s.base, Build: env.Build,
			Mode: mode, Header: header, Delta: delta, Cap: stateCap})
		return err
	})
	if full := (*state.Full)(nil); errors.As(err, &full) {
		return fmt.Errorf("%w: %v", ErrHeapTooLarge, full)
	}
	if err != nil {
		return err
	}
	s.checkpointed(version, mode)
	return nil
}
