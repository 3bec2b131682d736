package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// attached is a session made current for a run.
type attached struct {
	lv       *live
	info     SessionInfo
	notes    []string
	replayed []string // cells replayed from the caller's history: the log takes them at the next save (live.unlogged)
}

// attach makes sure key has a current interpreter, bringing it back when the warm copy
// is missing or stale: from its heap in Redis, by replaying its cells, or from the
// caller's history when Redis lost it. Called with the lease held.
func (e *Engine) attach(ctx context.Context, key string, req Request) (*attached, error) {
	a := &attached{}
	e.ckpt.awaitRetired(ctx, key)
	stored, err := e.st.Version(ctx, key)
	if err != nil {
		return nil, err
	}
	if lv := e.sess.claim(key, stored); lv != nil {
		if answers(ctx, lv.process()) {
			a.lv, a.info.RestoredFrom = lv, FromLive
			return a, nil
		}
		// The process died while idle (killed, or by the kernel's memory cap): this
		// run's code never reached it, so the session comes back as if evicted.
		e.sess.drop(key, lv, "its process stopped between runs")
	}
	for _, f := range req.Data {
		if f.Data == nil {
			// A process brought back holds no /data: say so before starting one.
			return nil, ErrDataStale
		}
	}
	var st *state.State
	if stored > 0 {
		if st, err = e.st.Load(ctx, key, false); err != nil {
			return nil, err
		}
	}
	// Bringing a session back goes on if the caller gives up (another run may want it);
	// each step of it has its own deadline. Only the wait for room ends with the caller.
	wait := ctx
	ctx = context.WithoutCancel(ctx)
	at := proc.AttachReq{Op: "attach", Files: []proc.FileBlob{}, Dirs: []string{}, Links: []proc.Link{}, Packages: []string{}, Cells: []string{}, CellTimeouts: []int64{}, Pip: []proc.PipWheel{},
		GraceMS: e.cfg.Grace.Milliseconds()}
	var o proc.Blobs
	var p *proc.Process
	mode := modeSnapshot
	base := e.procs.currentHash()
	var heapVersion int64
	heapStale := false
	switch {
	case st == nil:
		a.info.RestoredFrom = FromFresh
		seen, err := e.st.Seen(ctx, key)
		if err != nil {
			return nil, err
		}
		a.info.Expired = seen
		at.Reseed = true
		if e.cfg.ForceReplay {
			mode = modeReplay
		}
		if !seen {
			cells, err := lostCells(ctx, e.history, key, e.cfg.SessionTTL)
			if err != nil {
				return nil, fmt.Errorf("session history: %w", err)
			}
			if len(cells) > 0 {
				// Redis lost the session, but its runs are on record: bring it back by
				// running them again.
				a.info.RestoredFrom, a.replayed = FromReplay, cells
				at.Cells, at.CellTimeouts = e.cfg.splitCells(cells)
			}
		}
		if p, err = e.procs.readyProc(wait, ctx); err != nil {
			return nil, err
		}
	default:
		at.Files, at.Dirs, at.Links, at.Cwd = proc.TreeReq(state.TreeOf(st.Files), &o)
		at.Packages = nonNil(st.Packages)
		// A heap is only meaningful to the exact build that saved it; after an upgrade
		// the session comes back by replay.
		if st.Mode == modeSnapshot && !e.cfg.ForceReplay && len(st.Delta) > 0 && st.Build == e.rt.build {
			if p, err = e.procs.restoreProc(wait, ctx, st); err != nil {
				var pe *proc.Error
				if !errors.As(err, &pe) {
					return nil, err
				}
				e.log.Warn("session heap did not restore, replaying cells", "session", key, "err", err)
				a.notes = append(a.notes, "[sandbox] the saved interpreter state could not be restored; the session was rebuilt by replaying its cells")
				p = nil
			} else {
				// The heap as last checkpointed, then the runs logged since.
				a.info.RestoredFrom, base, heapVersion = FromSnapshot, st.Base, st.HeapVersion
				at.Cells, at.CellTimeouts = e.cfg.splitCells(st.Tail)
			}
		}
		if p == nil {
			// The whole log replays on the current base. A session that can be saved as
			// a heap stays so: its next checkpoint replaces a heap the replay made stale.
			a.info.RestoredFrom, heapStale = FromReplay, true
			if st.Mode == modeReplay || e.cfg.ForceReplay {
				mode = modeReplay
			}
			cells, err := e.st.Cells(ctx, key)
			if err != nil {
				return nil, err
			}
			at.Cells, at.CellTimeouts = e.cfg.splitCells(cells)
			at.Reseed = true
			if p, err = e.procs.readyProc(wait, ctx); err != nil {
				return nil, err
			}
		}
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer cancel()
	pk := e.procs.packages(p)
	defer pk.Done()
	if e.fetch != nil && (len(at.Packages) > 0 || len(at.Cells) > 0) {
		// A session comes back with its packages: the cache may have been emptied since.
		a.notes = append(a.notes, pk.Ensure(actx, strings.Join(at.Cells, "\n"), at.Packages)...)
		if u := pk.UnservedNames(); len(u) > 0 {
			// No import of this run may say it: the session lost them.
			a.notes = append(a.notes, pkgs.UnservedNote(u))
		}
	}
	var pip []pkgs.Wheel
	if st != nil {
		var notes []string
		at.Pip, pip, notes = e.pip.restore(actx, pk, key, st.Pip)
		a.notes = append(a.notes, notes...)
	}
	at.Data = []proc.DataFile{}
	if len(at.Cells) > 0 {
		for _, f := range req.Data {
			at.Data = append(at.Data, proc.DataFile{Name: f.Name, Data: o.Add(f.Data)})
		}
	}
	// The replay is a step of its own, with its own RestoreTimeout: a slow package fetch
	// before it does not count against the cells.
	rctx, rcancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer rcancel()
	f, err := p.Call(rctx, at, &o)
	if err != nil {
		p.Close("attach failed")
		// What trying again would meet again is the saved state's: it is reset, and the
		// run says so (attachOrReset). A process that died otherwise, or a restore that
		// ran out of time without cells to replay, may be the node's doing: tried again.
		pe := (*proc.Error)(nil)
		var why string
		switch {
		case errors.As(err, &pe) && pe.Kind == "replay":
			why = pe.Msg
		case len(at.Cells) > 0 && errors.Is(rctx.Err(), context.DeadlineExceeded):
			why = fmt.Sprintf("replaying its %d cells took longer than the %s restore limit (SANDCHAT_SANDBOX_RESTORE_TIMEOUT)", len(at.Cells), e.cfg.RestoreTimeout)
		case errors.As(err, &pe):
			why = pe.Msg
		case p.OutOfMemory():
			why = "bringing it back took more than the session's memory limit"
		}
		switch {
		case why != "" && st != nil:
			return nil, &brokenState{version: st.Version, why: why}
		case why != "":
			// Cells from the caller's history, with no saved state to reset.
			return nil, sandchat.Errorf(sandchat.ECONFLICT, "The session could not be restored: %s. Reset the session to start over.", why)
		}
		return nil, procErr(err, p)
	}
	var r proc.AttachReply
	_ = json.Unmarshal(f.JSON, &r)
	back := restored{base: base, mode: mode, heapVersion: heapVersion, heapStale: heapStale, unlogged: a.replayed}
	if r.Error != nil {
		a.notes = append(a.notes, "[sandbox] the session could not be fully restored: "+*r.Error)
		back.partial = true
	}
	if st != nil {
		back.version, back.packages, back.pip = st.Version, st.Packages, pip
	}
	lv := newLive(key, p, back)
	a.lv = lv
	if !e.res.adopt(key, lv) {
		p.Close("the engine shut down")
		return nil, errShutDown
	}
	return a, nil
}

// procErr turns a failure to start or reach a session process into the error callers see.
func procErr(err error, p *proc.Process) error {
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
