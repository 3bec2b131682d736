package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// maxSavedFilesPerRun bounds how many working-directory files one save may write.
const maxSavedFilesPerRun = maxChangedFiles

// check refuses a request outside the limits, saying which.
// Check tells whether the engine would take req for key under c's limits (the key, the
// code's size, the time limit, the preload, the /data files), for a caller that records
// a run before it asks for it. Execute checks again.
func (c Config) Check(key string, req Request) error { return c.check(key, &req) }

func (c *Config) check(key string, req *Request) error {
	if key == "" || len(key) > 512 {
		return sandchat.Errorf(sandchat.EINVALID, "Session key must be 1 to 512 bytes.")
	}
	if len(req.Code) > c.MaxCode {
		return sandchat.Errorf(sandchat.ETOOLARGE, "Code is %d bytes; the limit is %d bytes.", len(req.Code), c.MaxCode)
	}
	if req.Timeout < 0 || req.Timeout > c.MaxTimeout {
		return sandchat.Errorf(sandchat.EINVALID, "Timeout must be between 0 and %s.", c.MaxTimeout)
	}
	if err := CheckPreload(req.Preload); err != nil {
		return err
	}
	var total int64
	names := make(map[string]bool, len(req.Data))
	for _, f := range req.Data {
		if err := sandchat.CheckDataPath(f.Name); err != nil {
			return err
		}
		names[f.Name] = true
		total += max(f.Size, int64(len(f.Data)))
	}
	for _, f := range req.Data {
		for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
			if names[dir] {
				return sandchat.Errorf(sandchat.ECONFLICT, "/data/%s is a file, so /data/%s cannot be under it.", dir, f.Name)
			}
		}
	}
	if total > c.MaxDataBytes {
		return sandchat.Errorf(sandchat.ETOOLARGE, "The files under /data total %s; a run may mount at most %s.", sandchat.Size(total), sandchat.Size(c.MaxDataBytes))
	}
	return nil
}

// Execute runs req.Code in the session named by key (chosen by the caller, e.g.
// "conv:42" or "conv:42/agent:7"). Runs of one session are serialised across nodes.
// Cancelling ctx interrupts the running code; the interrupted Result comes back along
// with ctx's error.
func (e *Engine) Execute(ctx context.Context, key string, req Request) (Result, error) {
	if ok, why := e.Available(); !ok {
		return Result{}, sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", why)
	}
	if err := e.cfg.check(key, &req); err != nil {
		return Result{}, err
	}
	if req.Timeout == 0 {
		req.Timeout = e.cfg.Timeout
	}
	var res Result
	t0 := time.Now()
	var waited time.Duration
	err := e.leases.with(ctx, key, func(ctx context.Context, token string) error {
		waited = time.Since(t0)
		var err error
		res, err = e.runLocked(ctx, key, token, req)
		e.sizes(ctx, key, &res)
		return err
	})
	if res.Status != "" {
		// JSON callers get [] rather than null.
		if res.Artifacts == nil {
			res.Artifacts = []sandchat.Artifact{}
		}
		if res.Session.Packages == nil {
			res.Session.Packages = []string{}
		}
	}
	e.log.Debug("sandbox run", "session", key, "status", res.Status, "from", res.Session.RestoredFrom,
		"queued_ms", waited.Milliseconds(), "exec_ms", res.ExecutionMS, "total_ms", time.Since(t0).Milliseconds(), "state_bytes", res.Session.StateBytes)
	return res, err
}

// DataVersions tells which version of each file under /data the warm process of key
// on this node holds, or nil: a caller may then leave those files' Data out.
func (e *Engine) DataVersions(key string) map[string]string { return e.sess.dataVersions(key) }

func (e *Engine) runLocked(ctx context.Context, key, token string, req Request) (Result, error) {
	a, err := e.attachOrReset(ctx, key, req)
	if err != nil {
		return Result{}, err
	}
	res, failed, err := e.runIn(ctx, key, token, req, a)
	if failed != nil {
		return e.afterFailure(ctx, key, token, req, a, res, failed, err)
	}
	return res, err
}

// interpreterFailed is a run whose interpreter failed (its process died, or the Worker
// gave up) rather than answer: the session went back to its saved state.
type interpreterFailed struct {
	started bool // the process said the code started: the code may be what failed
	why     string
}

// runIn runs req in the session a brought back. A run whose interpreter failed comes
// back as a Result that says so, with failed set.
func (e *Engine) runIn(ctx context.Context, key, token string, req Request, a *attached) (Result, *interpreterFailed, error) {
	lv, info, notes := a.lv, a.info, a.notes
	p := lv.process()
	defer e.res.release(lv)
	var o proc.Blobs
	data, versions, err := lv.dataFor(req.Data, &o)
	if err != nil {
		return Result{}, nil, err
	}
	// What the run loads from the package cache is its own until it ends.
	pk := e.procs.packages(p)
	defer pk.Done()
	if e.fetch != nil {
		if req.OnOutput != nil {
			// Progress of what the run waits for before its code: shown live, not kept.
			pk.Progress = func(name string) { req.OnOutput("stderr", "[sandbox] fetching the package "+name+"…\n") }
		}
		fctx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
		notes = append(notes, pk.Ensure(fctx, preloadCode(req.Preload)+req.Code, nil)...)
		cancel()
	}
	msg := proc.RunReq{Op: "run", Code: req.Code, Filename: fmt.Sprintf("<cell-%d>", lv.info().Version+1),
		Data: data, DataVersions: versions, Preload: nonNil(req.Preload)}
	out, hooks := e.shape.hooks(req, e.pip.server(ctx, lv, pk))
	session := func() SessionInfo {
		s := lv.info()
		s.RestoredFrom, s.Expired, s.ResetFrom = info.RestoredFrom, info.Expired, info.ResetFrom
		return s
	}
	start := time.Now()
	lim := proc.RunLimits{Load: e.cfg.RestoreTimeout, Timeout: req.Timeout, Grace: e.cfg.Grace}
	rep := p.Run(ctx, msg, &o, lim, hooks, func() {
		// The code ignored KeyboardInterrupt: kill its process, and with it every
		// thread it started. The session goes back to its last durable state.
		e.sess.drop(key, lv, "the run ignored the interrupt")
	})
	ctxErr := rep.CtxErr
	if rep.Stuck {
		lost := session()
		return lostRun(StatusTimeout, "TimeoutError", fmt.Sprintf(
			"Execution did not stop within %s of the interrupt and was terminated; the session was restored to its last saved state (version %d). Variables defined since then are lost.",
			e.cfg.Grace, lost.Version), time.Since(start).Milliseconds(), lost, out.seen), nil, ctxErr
	}
	ms := time.Since(start).Milliseconds()
	if rep.Err != nil {
		e.sess.drop(key, lv, "the run failed")
		var pe *proc.Error
		switch {
		case errors.Is(rep.Err, proc.ErrGone):
			lost := session()
			return lostRun(StatusError, "SandboxError", fmt.Sprintf(
				"The session's process stopped during the run (%s); the session was restored to its last saved state (version %d).", p.Reason(), lost.Version),
				ms, lost, out.seen), &interpreterFailed{started: rep.Started, why: p.Reason()}, ctxErr
		case errors.As(rep.Err, &pe):
			// What the code printed before its interpreter failed was streamed as it came,
			// and is kept as for a process that died.
			return lostRun(StatusError, "SandboxError", "The session's interpreter failed and was restarted from its last saved state: "+pe.Msg,
				ms, session(), out.seen), &interpreterFailed{started: rep.Started, why: pe.Msg}, ctxErr
		}
		return Result{}, nil, rep.Err
	}
	var r proc.RunReply
	if err := json.Unmarshal(rep.Frame.JSON, &r); err == nil {
		err = r.Check(e.cfg.MaxOutput, maxChangedFiles, rep.Frame)
	}
	if err != nil {
		e.sess.drop(key, lv, "protocol: run reply refused")
		return Result{}, nil, fmt.Errorf("sandbox reply: %w", err)
	}
	res := e.shape.result(&r, rep.Frame, lv.ran(&r, rep.Frame, versions), notes)
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
	res.Session = session()
	res.Session.Live = true
	if res.Status != StatusSuccess {
		// Not saved: the session keeps it warm, tainted (live.ran).
		return res, nil, ctxErr
	}
	return res, nil, e.persist(ctx, key, token, lv, req, &r, &res, ctxErr)
}
