package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// reserveTimeout bounds the wait for a budget's reservation (other writes on the same
// storage go first): a write that waits longer is not made, as when the store cannot
// be reached.
const reserveTimeout = time.Minute

// reserved makes a write of a session's state within b: write gets what the state may
// hold, and runs with b's reservation held.
func (c Config) reserved(ctx context.Context, b Budget, write func(stateCap int64) error) error {
	if b.Reserve == nil {
		return write(c.MaxStateBytes)
	}
	rctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	room, release, err := b.Reserve(rctx)
	cancel()
	if err != nil {
		return err
	}
	defer release()
	return write(min(max(room, 0), c.MaxStateBytes))
}

// sizes completes what an answered run reports of its session's saved state, for a run
// persist did not save (it failed, or its state did not fit). Read under the run's
// lease, so no later run of the session is counted.
func (e *Engine) sizes(ctx context.Context, key string, res *Result) {
	if res.Status == "" || res.Session.StateBytes > 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	own, err := e.st.Bytes(ctx, key)
	if err != nil {
		e.log.WarnContext(ctx, "read session state size", "session", key, "err", err)
	}
	res.Session.StateBytes = own
}

// persist makes a successful run durable before it is reported complete: its cell joins
// the session's log in Redis with the files it changed (a few hundred bytes for most
// runs). The heap is saved later, off the answer's path (checkpoint.go); until then a
// restore replays the cells logged since the last checkpoint. After a run that failed,
// whose effects no cell in the log holds, the heap is saved before the answer.
func (e *Engine) persist(ctx context.Context, key, token string, lv *live, req Request, r *proc.RunReply, res *Result, ctxErr error) error {
	// The run is over: what it did is saved whether or not its caller still waits,
	// within what its budget leaves at this moment.
	bg := context.WithoutCancel(ctx)
	var v, stateBytes int64
	save, heapNow := lv.saveRequest(token, e.rt.build, r.Packages, e.cfg.logCell(req.Code, req.Timeout), req.Budget)
	err := e.cfg.reserved(bg, req.Budget, func(stateCap int64) (err error) {
		save.Cap = stateCap
		v, stateBytes, err = e.st.Save(bg, key, save)
		if sandchat.IsUnavailable(err) {
			// The answer may be what was lost (a timeout after the save went through): a
			// save is idempotent under its token, so asking once more tells. A run told it
			// was not saved would be run again, and applied twice.
			v, stateBytes, err = e.st.Save(bg, key, save)
		}
		return err
	})
	var full *state.Full
	if errors.As(err, &full) {
		// Nothing fits: the warm interpreter keeps the run's effects, but they are not
		// durable; the user is told what an eviction would take back.
		savedVersion := lv.taint()
		res.Session.NotSaved = true
		res.Stderr += fmt.Sprintf("[sandbox] session state not saved: %v; this run's changes live only while the session stays warm (saved version %d)\n", full, savedVersion)
		return ctxErr
	}
	if err != nil {
		// The warm interpreter is now ahead of Redis: drop it, so the next run starts
		// from the last state that was saved.
		e.sess.drop(key, lv, "its state could not be saved")
		e.log.ErrorContext(ctx, "save sandbox session", "session", key, "err", err)
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The code ran but its session state could not be saved; the next run continues from the last state that was saved.")
	}
	lv.saved(v)
	res.Session.Version, res.Session.Mode, res.Session.StateBytes = v, lv.info().Mode, stateBytes
	if heapNow {
		cctx, cancel := context.WithTimeout(bg, e.cfg.RestoreTimeout)
		err := e.ckpt.save(cctx, lv, token, v, req.Budget)
		cancel()
		if err != nil {
			// The log alone cannot bring this run back; a later checkpoint may still.
			e.log.WarnContext(ctx, "checkpoint after a failed run", "session", key, "err", err)
			why := sandchat.ErrorMessage(err)
			if errors.Is(err, errHeapTooLarge) {
				// The state limit is the user's to know: what holds it and by how much.
				why = err.Error()
			}
			res.Stderr += "[sandbox] this run's state holds changes no saved cell has (an earlier run failed or was not saved), and could not be saved yet (" +
				why + "): until it is, it lives only while the session stays warm\n"
		}
		res.Session.Mode = lv.info().Mode // a heap that cannot be saved turns the session to replay
	}
	e.ckpt.schedule(lv)
	return ctxErr
}

// StateBytes is what the saved states of keys hold together in both tiers (heap, files,
// replay log), from the store's counters alone; zero for a session with none.
func (e *Engine) StateBytes(ctx context.Context, keys ...string) (int64, error) {
	return e.st.Bytes(ctx, keys...)
}

// Session describes the durable state of key; ENOTFOUND when there is none.
func (e *Engine) Session(ctx context.Context, key string) (SessionInfo, error) {
	st, err := e.st.Load(ctx, key, false)
	if err != nil {
		return SessionInfo{}, err
	}
	if st == nil {
		return SessionInfo{}, sandchat.Errorf(sandchat.ENOTFOUND, "This conversation has no Python session.")
	}
	info := SessionInfo{Version: st.Version, Packages: nonNil(st.Packages), Mode: st.Mode, UpdatedAt: st.Updated, Files: []string{}}
	for p := range state.TreeOf(st.Files).Files {
		info.Files = append(info.Files, p)
	}
	sort.Strings(info.Files)
	if n, err := e.st.Bytes(ctx, key); err == nil {
		info.StateBytes = n
	}
	info.Live = e.sess.isLive(key, st.Version)
	return info, nil
}

// Reset forgets key's state; the next run starts a fresh interpreter. It waits for a
// run in progress to finish.
func (e *Engine) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sandchat.Errorf(sandchat.EINVALID, "Session key is required.")
	}
	return e.leases.with(ctx, key, func(context.Context, string) error {
		if err := e.st.Reset(ctx, key, false); err != nil {
			return err
		}
		if lv := e.sess.take(key); lv != nil {
			lv.process().Close("reset")
		}
		return nil
	})
}

// A cell in the session's log is its code, or, when it ran under a time limit other than
// the default, a NUL byte and JSON of both: Python source cannot hold a NUL byte, so no
// code that ran reads as the second form. A replay gives each cell its own limit again.
type loggedCell struct {
	Code      string `json:"code"`
	TimeoutMS int64  `json:"timeout_ms"`
}

// logCell is a run's cell as the log keeps it, under the configuration's default limit.
func (c Config) logCell(code string, timeout time.Duration) string {
	if timeout == 0 || timeout == c.Timeout {
		return code
	}
	b, _ := json.Marshal(loggedCell{Code: code, TimeoutMS: timeout.Milliseconds()})
	return "\x00" + string(b)
}

// splitCells decodes logged cells into their code and time limits in milliseconds.
func (c Config) splitCells(cells []string) (codes []string, timeouts []int64) {
	codes, timeouts = make([]string, 0, len(cells)), make([]int64, 0, len(cells))
	for _, cell := range cells {
		lc := loggedCell{Code: cell, TimeoutMS: c.Timeout.Milliseconds()}
		if strings.HasPrefix(cell, "\x00") {
			if json.Unmarshal([]byte(cell[1:]), &lc) != nil || lc.TimeoutMS <= 0 {
				lc = loggedCell{Code: "", TimeoutMS: c.Timeout.Milliseconds()}
			}
		}
		codes, timeouts = append(codes, lc.Code), append(timeouts, lc.TimeoutMS)
	}
	return codes, timeouts
}
