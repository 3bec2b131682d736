package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// checkpoints saves the heaps of live sessions off the runs' path, and before their
// processes go (eviction, shutdown).
type checkpoints struct {
	cfg   *Config // the engine's
	log   *slog.Logger
	st    Store
	sess  *sessions
	ctx   context.Context // the engine's: ends with Close
	lease func(ctx context.Context, key string, fn func(ctx context.Context, token string) error) error
	build string   // the runtime's build, set by Start before any session is live
	obs   Observer // told of each checkpoint attempted
	// idle is called when a checkpoint leaves its session idle: a session adopted while
	// this one was busy may have left more live than the bound (residency.trim).
	idle func()
}

// retireTimeout bounds the checkpoint an evicted session gets before its process goes;
// shutdownCheckpointTimeout, all of them at shutdown together.
const (
	retireTimeout             = 30 * time.Second
	shutdownCheckpointTimeout = 10 * time.Second
)

// schedule (re)arms lv's checkpoint for CheckpointDelay from now.
func (c *checkpoints) schedule(lv *live) {
	lv.armCheckpoint(c.cfg.CheckpointDelay, func() {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RestoreTimeout)
		defer cancel()
		err := c.live(ctx, lv)
		switch {
		case err == nil, c.ctx.Err() != nil:
		case expectedCheckpointErr(err):
			// The process died or another run moved the session on: its log has it.
			c.log.Debug("sandbox checkpoint skipped", "session", lv.name(), "err", err)
		default:
			c.log.Warn("sandbox checkpoint failed; the session stays durable by its log", "session", lv.name(), "err", err)
		}
	})
}

// retire checkpoints a session the set forgot (sessions.forgetLocked), then stops its
// process.
func (c *checkpoints) retire(lv *live, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	c.forgotten(ctx, lv, "eviction")
	cancel()
	lv.process().Close(why)
	c.sess.retired(lv)
}

// awaitRetired waits (bounded) for an eviction of key in flight, so the run that follows
// restores from the heap it saves.
func (c *checkpoints) awaitRetired(ctx context.Context, key string) {
	lv := c.sess.retiringOf(key)
	if lv == nil {
		return
	}
	select {
	case <-lv.retiring():
	case <-ctx.Done():
	case <-time.After(retireTimeout):
	}
}

// all saves the heap of every idle session that needs it, at shutdown; the
// sessions are no longer live, so no run can reach them meanwhile.
func (c *checkpoints) all(lvs []*live) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownCheckpointTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, lv := range lvs {
		wg.Go(func() { c.forgotten(ctx, lv, "shutdown") })
	}
	wg.Wait()
}

// forgotten saves the heap of a session taken out of the live set (eviction,
// shutdown), if it is idle and its saved heap lags. No run can reach its process any
// more, so the checkpoint needs no lease: the store still refuses it unless the session
// is at the version this heap holds. A failure is logged: the log has every run.
func (c *checkpoints) forgotten(ctx context.Context, lv *live, before string) {
	version, budget, due := lv.stopCheckpoint(ctx)
	if !due {
		return
	}
	err := c.save(ctx, lv, "", version, budget)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The call's deadline stops the process (ErrGone): said here, or a machine too
		// busy to save heaps in time would bring sessions back by replay without a word.
		c.log.Warn("sandbox checkpoint before "+before+" did not finish in time; the session comes back by its log", "session", lv.name(), "err", context.Cause(ctx))
	case !expectedCheckpointErr(err):
		c.log.Warn("sandbox checkpoint before "+before+" failed; the session comes back by its log", "session", lv.name(), "err", err)
	}
}

// live saves a live session's heap if the saved one lags it, holding the
// session's lease so no run (on any node) moves it meanwhile.
func (c *checkpoints) live(ctx context.Context, lv *live) error {
	if !lv.checkpointDue() {
		return nil
	}
	// A checkpoint whose lease is lost is refused by the store's fence: it goes on with
	// ctx, not the lease's, so its process is not killed for it.
	return c.lease(ctx, lv.name(), func(_ context.Context, token string) error {
		version, budget, ok := lv.beginCheckpoint()
		if !ok {
			return nil
		}
		defer func() {
			lv.endCheckpoint()
			lv.process().FreezeSoon()
			c.idle()
		}()
		return c.save(ctx, lv, token, version, budget)
	})
}

// save takes lv's heap and saves it as the state of version, within what budget (its
// last run's) leaves when it is written; token is the lease held, or "" for a session no
// run can reach.
func (c *checkpoints) save(ctx context.Context, lv *live, token string, version int64, budget Budget) (err error) {
	t0 := time.Now()
	defer func() { c.obs.Checkpointed(time.Since(t0), err) }()
	p := lv.process()
	// The heap is compressed as it arrives (heapstream.go): the server never holds it
	// whole, and keeps at most the state limit of it. The budget is reserved once it is
	// here, only for as long as it is written.
	capOf := c.cfg.MaxStateBytes
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
		return fmt.Errorf("%w: the heap's delta compresses to more than the session's %.1f MiB state limit", errHeapTooLarge, float64(capOf)/(1<<20))
	}
	mode, header, delta := modeSnapshot, in.header, in.delta
	if r.Header == nil {
		header, delta = nil, nil
	}
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
			c.log.Info("session switches to replay persistence", "session", lv.name(), "reason", *r.SnapshotError)
		}
	}
	err = c.cfg.reserved(ctx, budget, func(stateCap int64) error {
		_, err := c.st.Checkpoint(ctx, lv.name(), state.Checkpoint{Token: token, Version: version, Base: lv.baseHash(), Build: c.build,
			Mode: mode, Header: header, Delta: delta, Cap: stateCap})
		return err
	})
	if full := (*state.Full)(nil); errors.As(err, &full) {
		return fmt.Errorf("%w: %v", errHeapTooLarge, full)
	}
	if err != nil {
		return err
	}
	lv.checkpointed(version, mode)
	return nil
}
