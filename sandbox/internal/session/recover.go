package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// A session always recovers. A run whose interpreter fails leaves the session to its
// saved state; when that state may be what failed (the run's process had just been
// restored from it, or it failed again once restored), the engine checks it: it
// restores it once more and runs a cell of its own in it. A state that cannot run that
// either, or that cannot be restored at all, is reset, and the run says so: which
// version was lost (SessionInfo.ResetFrom), and the version the session goes on from.
// Code that never started is run again, in the restored or the new session: nothing of
// it ran, so nothing runs twice.

// brokenState is a saved state whose restore failed in the process (not for the node's
// sake: a process that died, or no room, is tried again).
type brokenState struct {
	version int64
	why     string
}

func (b *brokenState) Error() string {
	return fmt.Sprintf("the saved state of version %d could not be restored: %s", b.version, b.why)
}

// checkCell is what the engine runs to tell whether a restored state can run code.
const checkCell = "None"

// afterFailure is what follows a run whose interpreter failed in the session as Open
// (o) brought it back (res says so): the run again, when its code never started; a
// check of the saved state, when the failure may be that state's.
func (env *Env) afterFailure(ctx context.Context, key, token string, req Request, o *opened, res Result, failed *interpreterFailed, ctxErr error) (Result, error) {
	if ctxErr != nil {
		return res, ctxErr
	}
	if o.info.RestoredFrom == FromLive {
		if failed.started {
			// The code may be what failed: the saved state is not suspect.
			return res, ctxErr
		}
		// What failed is the process, left so by an earlier run (its JavaScript); the run
		// goes on from the saved state.
		again, err := Open(ctx, env, key, nil, req)
		if err != nil {
			return res, ctxErr
		}
		ao := again.takeOpened()
		var retried *interpreterFailed
		res, retried, ctxErr = again.runIn(ctx, token, req, ao)
		if retried == nil || ctxErr != nil {
			return res, ctxErr
		}
		o, failed = ao, retried
	}
	version := res.Session.Version
	if version == 0 || o.info.ResetFrom > 0 {
		// Nothing saved to blame: a new session, or one this run reset already.
		return res, ctxErr
	}
	why, broken := env.check(ctx, key, req)
	if !broken {
		return res, ctxErr
	}
	if err := env.resetBroken(ctx, key, why); err != nil {
		return res, ctxErr
	}
	note := resetNote(version, "it failed again once restored: "+why)
	if !failed.started {
		fresh, err := env.attach(ctx, key, nil, req)
		if err == nil {
			fo := fresh.takeOpened()
			fo.info.Expired, fo.info.ResetFrom = false, version
			fo.notes = append([]string{note}, fo.notes...)
			res, _, ctxErr = fresh.runIn(ctx, token, req, fo)
			return res, ctxErr
		}
	}
	res.Error.Message = fmt.Sprintf("The session's interpreter failed during the run (%s). %s", clip(failed.why, 300), note[len("[sandbox] "):])
	res.Session = SessionInfo{RestoredFrom: FromFresh, ResetFrom: version, Packages: []string{}}
	return res, ctxErr
}

// check restores key's saved state into a process of its own and runs checkCell in it
// as req would run (its /data and preloads): broken when that fails. What fails only on
// the way to a run's code (a replayed cell that broke mounting /data, say) is found so,
// and not passed as a state that runs. The process stays the session's when it answers.
// A check that cannot be made (no room, the store unreachable) finds nothing broken.
func (env *Env) check(ctx context.Context, key string, req Request) (why string, broken bool) {
	s, err := env.attach(ctx, key, nil, Request{Data: req.Data})
	var bs *brokenState
	if errors.As(err, &bs) {
		return bs.why, true
	}
	if err != nil {
		env.Log.Warn("sandbox: a failed session's saved state could not be checked", "session", key, "err", err)
		return "", false
	}
	o := s.takeOpened()
	p := s.p
	var blobs proc.Blobs
	files, held := o.files, map[string]string(nil)
	if files == nil {
		held = s.dataHeld()
		if files, err = env.Limits.data(ctx, req, held); err != nil {
			s.release()
			return "", false
		}
	}
	data, versions, err := dataFor(files, held, &blobs)
	if err != nil {
		s.release()
		return "", false
	}
	rep := p.Run(ctx, proc.RunReq{Op: "run", Code: checkCell, Filename: "<sandchat-check>", Data: data,
		DataVersions: versions, Preload: nonNil(req.Preload)}, &blobs,
		proc.RunLimits{Load: env.Limits.RestoreTimeout, Timeout: env.Limits.Timeout, Grace: env.Limits.Grace}, proc.RunHooks{},
		func() { s.drop("the check of its saved state did not stop") })
	var r proc.RunReply
	switch {
	case rep.Stuck:
		why = "a cell of the engine's did not stop"
	case errors.Is(rep.Err, proc.ErrGone):
		why = p.Reason()
	case rep.Err != nil:
		why = rep.Err.Error()
		if pe := (*proc.Error)(nil); errors.As(rep.Err, &pe) {
			why = pe.Msg
		}
	case json.Unmarshal(rep.Frame.JSON, &r) != nil || r.Status != StatusSuccess:
		why = "a cell of the engine's did not run"
		if r.Error != nil {
			why += ": " + r.Error.Type + ": " + r.Error.Message
		}
	default:
		s.release()
		return "", false
	}
	if !rep.Stuck {
		s.drop("its saved state failed the check")
	}
	env.Log.Warn("sandbox: a session's saved state cannot run code; resetting it", "session", key, "why", why)
	return clip(lastLine(why), 300), true
}

// resetBroken resets key, whose saved state cannot run, keeping it marked as a session
// that had a state (its history is not replayed into the new one).
func (env *Env) resetBroken(ctx context.Context, key, why string) error {
	if err := Reset(context.WithoutCancel(ctx), env, key, nil, true); err != nil {
		env.Log.Error("sandbox: reset of a session whose state cannot run", "session", key, "err", err)
		return err
	}
	env.Obs.SessionReset(ResetBroken)
	env.Log.Warn("sandbox: session reset, its saved state cannot run", "session", key, "why", why)
	return nil
}

// resetNote tells a run that its session was reset, and what that lost.
func resetNote(version int64, why string) string {
	return fmt.Sprintf("[sandbox] The session's saved state (version %d) could not be used (%s), so the session was reset: "+
		"its variables, files and installed packages are lost, and it starts over from a new interpreter.", version, clip(why, 300))
}

// lastLine is the last line of a traceback (the exception), or s as it is.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && strings.HasPrefix(s, "Traceback") {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

func clip(s string, n int) string { return sandchat.TruncateUTF8(s, n, "…") }
