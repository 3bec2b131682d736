package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Run runs req in the session, which Open handed to it, holding its lease (token). A
// run whose interpreter failed brings the session back (recover.go). The session is
// idle again once it returns, unless its process had to go.
func (s *Session) Run(ctx context.Context, token string, req Request) (res Result, err error) {
	ctx, span := s.env.span(ctx, "sandbox execute", s.key)
	defer func() { endSpan(span, err, "sandchat.run_status", res.Status) }()
	o := s.takeOpened()
	res, failed, err := s.runIn(ctx, token, req, o)
	if failed != nil {
		res, err = s.env.afterFailure(ctx, s.key, token, req, o, res, failed, err)
	}
	s.env.sizes(ctx, s.key, &res)
	return res, err
}

// interpreterFailed is a run whose interpreter failed (its process died, or the Worker
// gave up) rather than answer: the session went back to its saved state.
type interpreterFailed struct {
	started bool // the process said the code started: the code may be what failed
	why     string
}

// runIn runs req in the session, as Open (o) brought it back. A run whose interpreter
// failed comes back as a Result that says so, with failed set.
func (s *Session) runIn(ctx context.Context, token string, req Request, o *opened) (Result, *interpreterFailed, error) {
	env, p, info, notes := s.env, s.p, o.info, o.notes
	defer s.release()
	var blobs proc.Blobs
	files, held := o.files, map[string]string(nil)
	if files == nil {
		held = s.dataHeld()
		var err error
		if files, err = env.Limits.data(ctx, req, held); err != nil {
			return Result{}, nil, err
		}
	}
	data, versions, err := dataFor(files, held, &blobs)
	if err != nil {
		return Result{}, nil, err
	}
	// What the run loads from the package cache is its own until it ends.
	pk := env.packages(p)
	defer pk.Done()
	if env.Packages != nil {
		if req.OnOutput != nil {
			// Progress of what the run waits for before its code: shown live, not kept.
			pk.Progress = func(name string) { req.OnOutput("stderr", "[sandbox] fetching the package "+name+"…\n") }
		}
		fctx, cancel := context.WithTimeout(ctx, env.Limits.RestoreTimeout)
		notes = append(notes, pk.Ensure(fctx, PreloadCode(req.Preload)+req.Code, nil)...)
		cancel()
	}
	msg := proc.RunReq{Op: "run", Code: req.Code, Filename: fmt.Sprintf("<cell-%d>", s.info().Version+1),
		Data: data, DataVersions: versions, Preload: nonNil(req.Preload)}
	out, hooks := env.shaper().hooks(req, env.pipServer(ctx, s, pk))
	current := func() SessionInfo {
		cur := s.info()
		cur.RestoredFrom, cur.Expired, cur.ResetFrom = info.RestoredFrom, info.Expired, info.ResetFrom
		return cur
	}
	start := time.Now()
	lim := proc.RunLimits{Load: env.Limits.RestoreTimeout, Timeout: req.Timeout, Grace: env.Limits.Grace}
	rep := p.Run(ctx, msg, &blobs, lim, hooks, func() {
		// The code ignored KeyboardInterrupt: kill its process, and with it every
		// thread it started. The session goes back to its last durable state.
		s.drop("the run ignored the interrupt")
	})
	ctxErr := rep.CtxErr
	if rep.Stuck {
		lost := current()
		return lostRun(StatusTimeout, "TimeoutError", fmt.Sprintf(
			"Execution did not stop within %s of the interrupt and was terminated; the session was restored to its last saved state (version %d). Variables defined since then are lost.",
			env.Limits.Grace, lost.Version), time.Since(start).Milliseconds(), lost, out.seen), nil, ctxErr
	}
	ms := time.Since(start).Milliseconds()
	if rep.Err != nil {
		s.drop("the run failed")
		var pe *proc.Error
		switch {
		case errors.Is(rep.Err, proc.ErrGone):
			lost := current()
			return lostRun(StatusError, "SandboxError", fmt.Sprintf(
				"The session's process stopped during the run (%s); the session was restored to its last saved state (version %d).", p.Reason(), lost.Version),
				ms, lost, out.seen), &interpreterFailed{started: rep.Started, why: p.Reason()}, ctxErr
		case errors.As(rep.Err, &pe):
			// What the code printed before its interpreter failed was streamed as it came,
			// and is kept as for a process that died.
			return lostRun(StatusError, "SandboxError", "The session's interpreter failed and was restarted from its last saved state: "+pe.Msg,
				ms, current(), out.seen), &interpreterFailed{started: rep.Started, why: pe.Msg}, ctxErr
		}
		return Result{}, nil, rep.Err
	}
	var r proc.RunReply
	if err := json.Unmarshal(rep.Frame.JSON, &r); err == nil {
		err = r.Check(env.Limits.MaxOutput, MaxChangedFiles, rep.Frame)
	}
	if err != nil {
		s.drop("protocol: run reply refused")
		return Result{}, nil, fmt.Errorf("sandbox reply: %w", err)
	}
	res := env.shaper().result(&r, rep.Frame, s.ran(&r, rep.Frame, versions), notes)
	res.Order = out.seen.order(len(notesPrefix(notes)))
	out.disp.finish(&res, len(notesPrefix(notes)), r.DisplaysDropped)
	nameImages(&res)
	res.ExecutionMS = ms
	if rep.Interrupted && res.Status == StatusTimeout && res.Error != nil {
		if ctxErr != nil {
			res.Error.Message = "Execution was cancelled."
		} else {
			res.Error.Message = fmt.Sprintf("Execution exceeded the %s time limit and was interrupted; the session keeps its state.", req.Timeout)
		}
	}
	res.Session = current()
	res.Session.Live = true
	if res.Status != StatusSuccess {
		// Not saved: the session keeps it warm, tainted (live.ran).
		return res, nil, ctxErr
	}
	return res, nil, s.persist(ctx, token, req, &r, &res, ctxErr)
}

// reserveTimeout bounds the wait for a budget's reservation (other writes on the same
// storage go first): a write that waits longer is not made, as when the store cannot
// be reached.
const reserveTimeout = time.Minute

// reserved makes a write of a session's state within b: write gets what the state may
// hold, and runs with b's reservation held.
func (l Limits) reserved(ctx context.Context, b Budget, write func(stateCap int64) error) error {
	if b.Reserve == nil {
		return write(l.MaxStateBytes)
	}
	rctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	room, release, err := b.Reserve(rctx)
	cancel()
	if err != nil {
		return err
	}
	defer release()
	return write(min(max(room, 0), l.MaxStateBytes))
}

// sizes completes what an answered run reports of its session's saved state, for a run
// persist did not save (it failed, or its state did not fit). Read under the run's
// lease, so no later run of the session is counted.
func (env *Env) sizes(ctx context.Context, key string, res *Result) {
	if res.Status == "" || res.Session.StateBytes > 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	own, err := env.Store.Bytes(ctx, key)
	if err != nil {
		env.Log.WarnContext(ctx, "read session state size", "session", key, "err", err)
	}
	res.Session.StateBytes = own
}

// persist makes a successful run durable before it is reported complete: its cell joins
// the session's log in Redis with the files it changed (a few hundred bytes for most
// runs). The heap is saved later, off the answer's path (checkpoint.go); until then a
// restore replays the cells logged since the last checkpoint. After a run that failed,
// whose effects no cell in the log holds, the heap is saved before the answer.
func (s *Session) persist(ctx context.Context, token string, req Request, r *proc.RunReply, res *Result, ctxErr error) error {
	env, key := s.env, s.key
	// The run is over: what it did is saved whether or not its caller still waits,
	// within what its budget leaves at this moment.
	bg := context.WithoutCancel(ctx)
	var v, stateBytes int64
	save, heapNow := s.saveRequest(token, env.Build, r.Packages, env.Limits.logCell(req.Code, req.Timeout), req.Budget)
	err := env.Limits.reserved(bg, req.Budget, func(stateCap int64) (err error) {
		save.Cap = stateCap
		v, stateBytes, err = env.Store.Save(bg, key, save)
		if sandchat.IsUnavailable(err) {
			// The answer may be what was lost (a timeout after the save went through): a
			// save is idempotent under its token, so asking once more tells. A run told it
			// was not saved would be run again, and applied twice.
			v, stateBytes, err = env.Store.Save(bg, key, save)
		}
		return err
	})
	var full *state.Full
	if errors.As(err, &full) {
		// Nothing fits: the warm interpreter keeps the run's effects, but they are not
		// durable; the user is told what an eviction would take back.
		savedVersion := s.taint()
		res.Session.NotSaved = true
		res.Stderr += fmt.Sprintf("[sandbox] session state not saved: %v; this run's changes live only while the session stays warm (saved version %d)\n", full, savedVersion)
		return ctxErr
	}
	if err != nil {
		// The warm interpreter is now ahead of Redis: drop it, so the next run starts
		// from the last state that was saved.
		s.drop("its state could not be saved")
		env.Log.ErrorContext(ctx, "save sandbox session", "session", key, "err", err)
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The code ran but its session state could not be saved; the next run continues from the last state that was saved.")
	}
	s.saved(v)
	res.Session.Version, res.Session.Mode, res.Session.StateBytes = v, s.info().Mode, stateBytes
	if heapNow {
		cctx, cancel := context.WithTimeout(bg, env.Limits.RestoreTimeout)
		err := s.save(cctx, token, v, req.Budget)
		cancel()
		if err != nil {
			// The log alone cannot bring this run back; a later checkpoint may still.
			env.Log.WarnContext(ctx, "checkpoint after a failed run", "session", key, "err", err)
			why := sandchat.ErrorMessage(err)
			if errors.Is(err, ErrHeapTooLarge) {
				// The state limit is the user's to know: what holds it and by how much.
				why = err.Error()
			}
			res.Stderr += "[sandbox] this run's state holds changes no saved cell has (an earlier run failed or was not saved), and could not be saved yet (" +
				why + "): until it is, it lives only while the session stays warm\n"
		}
		res.Session.Mode = s.info().Mode // a heap that cannot be saved turns the session to replay
	}
	s.schedule()
	return ctxErr
}

// A cell in the session's log is its code, or, when it ran under a time limit other than
// the default, a NUL byte and JSON of both: Python source cannot hold a NUL byte, so no
// code that ran reads as the second form. A replay gives each cell its own limit again.
type loggedCell struct {
	Code      string `json:"code"`
	TimeoutMS int64  `json:"timeout_ms"`
}

// logCell is a run's cell as the log keeps it, under the configuration's default limit.
func (l Limits) logCell(code string, timeout time.Duration) string {
	if timeout == 0 || timeout == l.Timeout {
		return code
	}
	b, _ := json.Marshal(loggedCell{Code: code, TimeoutMS: timeout.Milliseconds()})
	return "\x00" + string(b)
}

// splitCells decodes logged cells into their code and time limits in milliseconds.
func (l Limits) splitCells(cells []string) (codes []string, timeouts []int64) {
	codes, timeouts = make([]string, 0, len(cells)), make([]int64, 0, len(cells))
	for _, cell := range cells {
		lc := loggedCell{Code: cell, TimeoutMS: l.Timeout.Milliseconds()}
		if strings.HasPrefix(cell, "\x00") {
			if json.Unmarshal([]byte(cell[1:]), &lc) != nil || lc.TimeoutMS <= 0 {
				lc = loggedCell{Code: "", TimeoutMS: l.Timeout.Milliseconds()}
			}
		}
		codes, timeouts = append(codes, lc.Code), append(timeouts, lc.TimeoutMS)
	}
	return codes, timeouts
}
