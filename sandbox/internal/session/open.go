package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// opened is what the run that opened a session tells of it in its Result.
type opened struct {
	info  SessionInfo // where it came from, and whether it was reset or had expired
	notes []string    // what its run's stderr says first
	files []File      // the run's /data, when bringing the session back needed it already
}

// Open brings key's session into a process for a run, and hands it to that run
// (running): warm, the node's session of key (or nil), when it is current; else from
// the store's heap, by replaying its cells, or fresh (rebuilt from the caller's history
// when the store lost it). A saved state that cannot be restored is reset, and the run
// is told first. It is called with key's lease held.
func Open(ctx context.Context, env *Env, key string, warm *Session, req Request) (*Session, error) {
	s, err := env.attach(ctx, key, warm, req)
	var broken *brokenState
	if !errors.As(err, &broken) {
		return s, err
	}
	if err := env.resetBroken(ctx, key, broken.why); err != nil {
		return nil, err
	}
	broken.why = lastLine(broken.why)
	if s, err = env.attach(ctx, key, nil, req); err != nil {
		return nil, err
	}
	s.opened.info.Expired, s.opened.info.ResetFrom = false, broken.version
	s.opened.notes = append([]string{resetNote(broken.version, "it could not be restored: "+broken.why)}, s.opened.notes...)
	return s, nil
}

// Reset forgets key's saved state (seen keeps it marked as one that had a state, whose
// history is not replayed into a new one) and stops warm, the node's session of key (or
// nil): the next run starts a fresh interpreter. It is called with key's lease held.
func Reset(ctx context.Context, env *Env, key string, warm *Session, seen bool) error {
	if err := env.Store.Reset(ctx, key, seen); err != nil {
		return err
	}
	if warm != nil {
		warm.drop("reset")
	}
	return nil
}

// attach is Open without the reset of a broken state, which it reports as a
// *brokenState.
func (env *Env) attach(ctx context.Context, key string, warm *Session, req Request) (_ *Session, err error) {
	op := &opened{}
	t0 := time.Now()
	if warm != nil {
		// An eviction in flight: the run that follows restores from the heap it saves.
		wctx, cancel := context.WithTimeout(ctx, retireTimeout)
		warm.await(wctx, func() bool { return warm.phase != retiring })
		cancel()
	}
	stored, err := env.Store.Version(ctx, key)
	if err != nil {
		return nil, err
	}
	if warm != nil && warm.claim(stored) {
		if answers(ctx, warm.p) {
			warm.hand(&opened{info: SessionInfo{RestoredFrom: FromLive}})
			return warm, nil
		}
		// The process died while idle (killed, or by the kernel's memory cap): this
		// run's code never reached it, so the session comes back as if evicted.
		warm.drop("its process stopped between runs")
	}
	// From here the session is brought back: a step of the run's trace.
	ctx, span := env.span(ctx, "sandbox restore", key)
	defer func() { endSpan(span, err, "sandchat.restored_from", op.info.RestoredFrom) }()
	var st *state.State
	if stored > 0 {
		if st, err = env.Store.Load(ctx, key, false); err != nil {
			return nil, err
		}
	}
	// Bringing a session back goes on if the caller gives up (another run may want it);
	// each step of it has its own deadline. Only the wait for room ends with the caller.
	wait := ctx
	ctx = context.WithoutCancel(ctx)
	at := proc.AttachReq{Op: "attach", Files: []proc.FileBlob{}, Dirs: []string{}, Links: []proc.Link{}, Packages: []string{}, Cells: []string{}, CellTimeouts: []int64{}, Pip: []proc.PipWheel{},
		GraceMS: env.Limits.Grace.Milliseconds()}
	var o proc.Blobs
	var p *proc.Process
	// The run needs a process from here on: how long it waited for room on the node is
	// told however the attach ends.
	var replayed []string // cells from the caller's history: the log takes them at the next save
	var waited time.Duration
	defer func() { env.Obs.AdmissionWaited(waited) }()
	mode := modeSnapshot
	base := env.Procs.Base()
	var heapVersion int64
	heapStale := false
	switch {
	case st == nil:
		op.info.RestoredFrom = FromFresh
		seen, err := env.Store.Seen(ctx, key)
		if err != nil {
			return nil, err
		}
		op.info.Expired = seen
		at.Reseed = true
		if env.Limits.ForceReplay {
			mode = modeReplay
		}
		if !seen {
			cells, err := lostCells(ctx, env.History, key, env.Limits.SessionTTL)
			if err != nil {
				return nil, fmt.Errorf("session history: %w", err)
			}
			if len(cells) > 0 {
				// Redis lost the session, but its runs are on record: bring it back by
				// running them again.
				op.info.RestoredFrom, replayed = FromReplay, cells
				at.Cells, at.CellTimeouts = env.Limits.splitCells(cells)
			}
		}
		if p, err = env.Procs.Ready(wait, ctx, &waited); err != nil {
			return nil, err
		}
	default:
		at.Files, at.Dirs, at.Links, at.Cwd = proc.TreeReq(state.TreeOf(st.Files), &o)
		at.Packages = nonNil(st.Packages)
		// A heap is only meaningful to the exact build that saved it; after an upgrade
		// the session comes back by replay.
		if st.Mode == modeSnapshot && !env.Limits.ForceReplay && len(st.Delta) > 0 && st.Build == env.Build {
			if p, err = env.restoreHeap(wait, ctx, &waited, st); err != nil {
				var pe *proc.Error
				if !errors.As(err, &pe) {
					return nil, err
				}
				env.Log.Warn("session heap did not restore, replaying cells", "session", key, "err", err)
				op.notes = append(op.notes, "[sandbox] the saved interpreter state could not be restored; the session was rebuilt by replaying its cells")
				p = nil
			} else {
				// The heap as last checkpointed, then the runs logged since.
				op.info.RestoredFrom, base, heapVersion = FromSnapshot, st.Base, st.HeapVersion
				at.Cells, at.CellTimeouts = env.Limits.splitCells(st.Tail)
			}
		}
		if p == nil {
			// The whole log replays on the current base. A session that can be saved as
			// a heap stays so: its next checkpoint replaces a heap the replay made stale.
			op.info.RestoredFrom, heapStale = FromReplay, true
			if st.Mode == modeReplay || env.Limits.ForceReplay {
				mode = modeReplay
			}
			cells, err := env.Store.Cells(ctx, key)
			if err != nil {
				return nil, err
			}
			at.Cells, at.CellTimeouts = env.Limits.splitCells(cells)
			at.Reseed = true
			if p, err = env.Procs.Ready(wait, ctx, &waited); err != nil {
				return nil, err
			}
		}
	}
	actx, cancel := context.WithTimeout(ctx, env.Limits.RestoreTimeout)
	defer cancel()
	pk := env.packages(p)
	defer pk.Done()
	if env.Packages != nil && (len(at.Packages) > 0 || len(at.Cells) > 0) {
		// A session comes back with its packages: the cache may have been emptied since.
		op.notes = append(op.notes, pk.Ensure(actx, strings.Join(at.Cells, "\n"), at.Packages)...)
		if u := pk.UnservedNames(); len(u) > 0 {
			// No import of this run may say it: the session lost them.
			op.notes = append(op.notes, pkgs.UnservedNote(u))
		}
	}
	var pip []pkgs.Wheel
	if st != nil {
		var notes []string
		at.Pip, pip, notes = env.restorePip(actx, pk, key, st.Pip)
		op.notes = append(op.notes, notes...)
	}
	at.Data = []proc.DataFile{}
	if len(at.Cells) > 0 {
		// The cells replay with /data mounted: all of it, as a process brought back holds
		// none. The run sends the same files.
		files, err := env.Limits.data(ctx, req, nil)
		if err != nil {
			p.Close("attach failed")
			return nil, err
		}
		op.files = files
		for _, f := range files {
			at.Data = append(at.Data, proc.DataFile{Name: f.Name, Data: o.Add(f.Data)})
		}
	}
	// The replay is a step of its own, with its own RestoreTimeout: a slow package fetch
	// before it does not count against the cells.
	rctx, rcancel := context.WithTimeout(ctx, env.Limits.RestoreTimeout)
	defer rcancel()
	f, err := p.Call(rctx, at, &o)
	if err != nil {
		p.Close("attach failed")
		// What trying again would meet again is the saved state's: it is reset, and the
		// run says so (Open). A process that died otherwise, or a restore that ran out of
		// time without cells to replay, may be the node's doing: tried again.
		pe := (*proc.Error)(nil)
		var why string
		switch {
		case errors.As(err, &pe) && pe.Kind == "replay":
			why = pe.Msg
		case len(at.Cells) > 0 && errors.Is(rctx.Err(), context.DeadlineExceeded):
			why = fmt.Sprintf("replaying its %d cells took longer than the %s restore limit (SANDCHAT_SANDBOX_RESTORE_TIMEOUT)", len(at.Cells), env.Limits.RestoreTimeout)
		case errors.As(err, &pe):
			why = pe.Msg
		case p.OOMKilled():
			why = "bringing it back took more than the session's memory limit"
		}
		switch {
		case why != "" && st != nil:
			return nil, &brokenState{version: st.Version, why: why}
		case why != "":
			// Cells from the caller's history, with no saved state to reset.
			return nil, sandchat.Errorf(sandchat.ECONFLICT, "The session could not be restored: %s. Reset the session to start over.", why)
		}
		return nil, ProcessError(err, p)
	}
	var r proc.AttachReply
	_ = json.Unmarshal(f.JSON, &r)
	back := restored{base: base, mode: mode, heapVersion: heapVersion, heapStale: heapStale, unlogged: replayed}
	if r.Error != nil {
		op.notes = append(op.notes, "[sandbox] the session could not be fully restored: "+*r.Error)
		back.partial = true
	}
	if st != nil {
		back.version, back.packages, back.pip = st.Version, st.Packages, pip
	}
	s := newSession(env, key, p, back)
	s.hand(op)
	if !env.Adopt(key, s) {
		p.Close("the engine shut down")
		return nil, errShutDown
	}
	env.Obs.Restored(op.info.RestoredFrom, time.Since(t0)-waited)
	return s, nil
}

// ProcessError turns a failure to start or reach a session process into the error callers see.
func ProcessError(err error, p *proc.Process) error {
	var pe *proc.Error
	switch {
	case errors.Is(err, proc.ErrGone) && p != nil:
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python session process stopped (%s); try again.", p.Reason())
	case errors.As(err, &pe):
		return fmt.Errorf("sandbox session: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python session did not start in time; try again.")
	}
	return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python session could not be started: %v", err)
}

// errShutDown answers a run whose session came back as the engine shut down.
var errShutDown = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "The Python sandbox is shutting down on this server; run the code again."}

// probeTimeout bounds the liveness probe before a warm run; a process that cannot
// answer a stats request in this long on a loaded node is not fit to run code either.
const probeTimeout = 10 * time.Second

// answers tells whether p still runs. A process killed while frozen between runs only
// dies when thawed, so Alive() cannot know until something is sent to it: the probe
// thaws it and asks, before any code is given to it.
func answers(ctx context.Context, p *proc.Process) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	_, err := p.Call(ctx, proc.StatsReq{Op: "stats"}, nil)
	return err == nil
}

// packages opens what one load in p (a run, a restore) may take from the package cache;
// Done ends it. nil without a fetcher.
func (env *Env) packages(p *proc.Process) *pkgs.Load {
	if env.Packages == nil || p.View() == nil {
		return nil
	}
	return env.Packages.Begin(p.View())
}

// restoreHeap brings a saved heap back in a process primed with the base it was saved
// against (wait bounds the wait for room on the node, which waited adds to).
func (env *Env) restoreHeap(wait, ctx context.Context, waited *time.Duration, st *state.State) (*proc.Process, error) {
	p, err := env.Procs.Primed(wait, ctx, waited, st.Base)
	if err != nil {
		return nil, err
	}
	var o proc.Blobs
	ctx, cancel := context.WithTimeout(ctx, env.Limits.RestoreTimeout)
	defer cancel()
	delta, err := deltaBlob(&o, p.Base(), st.Delta)
	if err != nil {
		p.Close("restore failed")
		return nil, &proc.Error{Msg: err.Error()}
	}
	if _, err := p.Call(ctx, proc.LoadReq{Op: "load", Header: o.Add(st.Header), Delta: delta}, &o); err != nil {
		p.Close("restore failed")
		if errors.Is(err, proc.ErrGone) {
			// The heap itself took the process down (over the memory cap, say).
			return nil, &proc.Error{Msg: p.Reason()}
		}
		return nil, err
	}
	return p, nil
}
