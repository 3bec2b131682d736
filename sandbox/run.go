package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// maxSavedFilesPerRun bounds how many working-directory files one save may write.
const maxSavedFilesPerRun = maxChangedFiles

func (e *Engine) check(key string, req *Request) error {
	if ok, why := e.Available(); !ok {
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", why)
	}
	if key == "" || len(key) > 512 {
		return sandchat.Errorf(sandchat.EINVALID, "Session key must be 1 to 512 bytes.")
	}
	if len(req.Code) > e.cfg.MaxCode {
		return sandchat.Errorf(sandchat.ETOOLARGE, "Code is %d bytes; the limit is %d bytes.", len(req.Code), e.cfg.MaxCode)
	}
	if req.Timeout < 0 || req.Timeout > e.cfg.MaxTimeout {
		return sandchat.Errorf(sandchat.EINVALID, "Timeout must be between 0 and %s.", e.cfg.MaxTimeout)
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
	if total > e.cfg.MaxDataBytes {
		return sandchat.Errorf(sandchat.ETOOLARGE, "The files under /data total %s; a run may mount at most %s.", sandchat.Size(total), sandchat.Size(e.cfg.MaxDataBytes))
	}
	return nil
}

// Execute runs req.Code in the session named by key (chosen by the caller, e.g.
// "conv:42" or "conv:42/agent:7"). Runs of one session are serialised across nodes.
// Cancelling ctx interrupts the running code; the interrupted Result comes back along
// with ctx's error.
func (e *Engine) Execute(ctx context.Context, key string, req Request) (Result, error) {
	if err := e.check(key, &req); err != nil {
		return Result{}, err
	}
	if req.Timeout == 0 {
		req.Timeout = e.cfg.Timeout
	}
	var res Result
	t0 := time.Now()
	var waited time.Duration
	err := e.withLease(ctx, key, func(token string) error {
		waited = time.Since(t0)
		var err error
		res, err = e.runLocked(ctx, key, token, req)
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

// attached is a session made current for a run.
type attached struct {
	lv       *live
	info     SessionInfo
	notes    []string
	replayed []string // cells replayed from the caller's history: they join the replay log
}

// attach makes sure key has a current interpreter, bringing it back when the warm copy
// is missing or stale: from its heap in Redis, by replaying its cells, or from the
// caller's history when Redis lost it. Called with the lease held.
func (e *Engine) attach(ctx context.Context, key string, req Request) (*attached, error) {
	a := &attached{}
	e.awaitRetired(ctx, key)
	stored, err := e.st.Version(ctx, key)
	if err != nil {
		return nil, err
	}
	if lv := e.claim(key, stored); lv != nil {
		if e.answers(ctx, lv.p) {
			a.lv, a.info.RestoredFrom = lv, FromLive
			return a, nil
		}
		// The process died while idle (killed, or by the kernel's memory cap): this
		// run's code never reached it, so the session comes back as if evicted.
		e.dropLive(key, lv, "its process stopped between runs")
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
	at := attachReq{Op: "attach", Files: []fileBlob{}, Packages: []string{}, Cells: []string{}, CellTimeouts: []int64{},
		GraceMS: e.cfg.Grace.Milliseconds()}
	var o blobs
	var p *proc
	mode := modeSnapshot
	base := e.rt.baseHash
	var heapVersion int64
	heapStale := false
	switch {
	case st == nil:
		a.info.RestoredFrom = FromFresh
		seen, _ := e.st.Seen(ctx, key)
		a.info.Expired = seen
		at.Reseed = true
		if e.cfg.ForceReplay {
			mode = modeReplay
		}
		if !seen {
			cells, err := e.lostCells(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("session history: %w", err)
			}
			if len(cells) > 0 {
				// Redis lost the session, but its runs are on record: bring it back by
				// running them again.
				a.info.RestoredFrom, a.replayed = FromReplay, cells
				at.Cells, at.CellTimeouts = e.splitCells(cells)
			}
		}
		if p, err = e.readyProc(wait, ctx); err != nil {
			return nil, err
		}
	default:
		files := make([]fileBlob, 0, len(st.Files))
		for name, d := range st.Files {
			files = append(files, fileBlob{Path: name, Data: o.add(d)})
		}
		at.Files, at.Packages = files, nonNil(st.Packages)
		// A heap is only meaningful to the exact build that saved it; after an upgrade
		// the session comes back by replay.
		if st.Mode == modeSnapshot && !e.cfg.ForceReplay && len(st.Delta) > 0 && st.Build == e.rt.build {
			if p, err = e.restoreProc(wait, ctx, st); err != nil {
				var pe *procError
				if !errors.As(err, &pe) {
					return nil, err
				}
				e.log.Warn("session heap did not restore, replaying cells", "session", key, "err", err)
				a.notes = append(a.notes, "[sandbox] the saved interpreter state could not be restored; the session was rebuilt by replaying its cells")
				p = nil
			} else {
				// The heap as last checkpointed, then the runs logged since.
				a.info.RestoredFrom, base, heapVersion = FromSnapshot, st.Base, st.HeapVersion
				at.Cells, at.CellTimeouts = e.splitCells(st.Tail)
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
			at.Cells, at.CellTimeouts = e.splitCells(cells)
			at.Reseed = true
			if p, err = e.readyProc(wait, ctx); err != nil {
				return nil, err
			}
		}
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer cancel()
	pk := e.packages(p)
	defer pk.Done()
	if e.fetch != nil && (len(at.Packages) > 0 || len(at.Cells) > 0) {
		// A session comes back with its packages: the cache may have been emptied since.
		a.notes = append(a.notes, pk.Ensure(actx, strings.Join(at.Cells, "\n"), at.Packages)...)
	}
	at.Pip = []pipInstallMsg{}
	var pip []pkgs.Wheel
	if st != nil && len(st.Pip) > 0 {
		if err := json.Unmarshal(st.Pip, &pip); err != nil {
			e.log.Warn("session's micropip record does not decode", "session", key, "err", err)
		}
	}
	if len(pip) > 0 {
		if e.fetch == nil {
			a.notes = append(a.notes, "[sandbox] packages installed with micropip are not restored: installing is turned off")
		} else {
			wheels, notes := e.restorePip(actx, pk, pip)
			at.Pip, a.notes = wheels, append(a.notes, notes...)
		}
	}
	at.Data = []dataFile{}
	if len(at.Cells) > 0 {
		for _, f := range req.Data {
			at.Data = append(at.Data, dataFile{Name: f.Name, Data: o.add(f.Data)})
		}
	}
	f, err := p.call(actx, at, &o)
	if err != nil {
		p.close("attach failed")
		if pe := (*procError)(nil); errors.As(err, &pe) && pe.kind == "replay" {
			return nil, sandchat.Errorf(sandchat.ECONFLICT,
				"The session could not be restored: %s. Reset the session to start over.", pe.msg)
		}
		return nil, e.procErr(err, p, 0)
	}
	var r attachReply
	_ = json.Unmarshal(f.raw, &r)
	if r.Error != nil {
		a.notes = append(a.notes, "[sandbox] the session could not be fully restored: "+*r.Error)
	}
	lv := newLive(key, p, base, mode)
	if st != nil {
		lv.version, lv.packages, lv.pip = st.Version, st.Packages, pip
	}
	lv.heapVersion, lv.heapStale = heapVersion, heapStale
	a.lv = lv
	e.adopt(key, lv)
	return a, nil
}

// readyProc is a process with the base interpreter: from the warm pool, or started now
// once the node has room for it (wait bounds the wait for room).
func (e *Engine) readyProc(wait, ctx context.Context) (*proc, error) {
	if p := e.pool.takeReady(); p != nil {
		return p, nil
	}
	// Starting is bounded on its own (a loaded machine may take seconds): RestoreTimeout
	// bounds the restore work that follows.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolStartBudget)
	defer cancel()
	return e.spawn(wait, ctx, e.currentBase(), func(p *proc) error {
		if _, err := p.call(ctx, loadReq{Op: "load"}, nil); err != nil {
			return e.procErr(err, p, 0)
		}
		return nil
	})
}

// restoreProc brings a saved heap back in a process primed with the base it was saved
// against: a spare from the pool when that is the current base, else one started once
// the node has room for it (wait bounds the wait for room).
func (e *Engine) restoreProc(wait, ctx context.Context, st *state.State) (*proc, error) {
	var p *proc
	if st.Base == e.rt.baseHash {
		p = e.pool.takeSpare()
	}
	if p == nil {
		base := e.currentBase()
		if st.Base != e.rt.baseHash {
			b, err := e.st.LoadBase(ctx, st.Base)
			if err != nil {
				return nil, err
			}
			if b == nil {
				return nil, &procError{msg: "the base snapshot of this session is gone"}
			}
			base = b
		}
		start, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolStartBudget)
		defer cancel()
		var err error
		if p, err = e.spawn(wait, start, base, nil); err != nil {
			return nil, err
		}
	}
	var o blobs
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer cancel()
	if _, err := p.call(ctx, loadReq{Op: "load", Header: o.add(st.Header), Delta: o.add(p.xorBase(st.Delta))}, &o); err != nil {
		p.close("restore failed")
		if errors.Is(err, errProcGone) {
			// The heap itself took the process down (over the memory cap, say).
			return nil, &procError{msg: p.reason()}
		}
		return nil, err
	}
	return p, nil
}

// procErr turns a failure to start or reach a session process into the error callers see.
func (e *Engine) procErr(err error, p *proc, version int64) error {
	var pe *procError
	switch {
	case errors.Is(err, errProcGone) && p != nil:
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python session process stopped (%s); try again.", p.reason())
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

func (e *Engine) runLocked(ctx context.Context, key, token string, req Request) (Result, error) {
	a, err := e.attach(ctx, key, req)
	if err != nil {
		return Result{}, err
	}
	lv, info, notes := a.lv, a.info, a.notes
	p := lv.p
	defer e.release(lv)
	var o blobs
	data, versions, err := e.dataFor(lv, req.Data, &o)
	if err != nil {
		return Result{}, err
	}
	// What the run loads from the package cache is its own until it ends.
	pk := e.packages(p)
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
	pip := e.newPipServer(ctx, lv, pk)
	p.setPip(pip.handle)
	defer p.setPip(nil)
	msg := runReq{Op: "run", Code: req.Code, Filename: fmt.Sprintf("<cell-%d>", lv.version+1),
		Data: data, DataVersions: versions, Preload: nonNil(req.Preload)}
	disp := &displays{max: e.cfg.MaxDisplays, maxBytes: e.cfg.MaxDisplayBytes, maxImage: max(e.cfg.MaxArtifactBytes, 1), on: req.OnDisplay}
	p.setOutput(func(stream, chunk string) {
		disp.wrote(stream, len(chunk))
		if req.OnOutput != nil {
			req.OnOutput(stream, chunk)
		}
	})
	defer p.setOutput(nil)
	p.setDisplay(disp.add)
	defer p.setDisplay(nil)
	session := func() SessionInfo {
		return SessionInfo{Version: lv.version, RestoredFrom: info.RestoredFrom, Packages: nonNil(lv.packages), Expired: info.Expired, Mode: lv.mode}
	}

	type reply struct {
		f   frame
		err error
	}
	done := make(chan reply, 1)
	start := time.Now()
	// The call's own deadline is the backstop: past the load, the run's timeout, the
	// grace and time to save, the process is killed whatever it is doing.
	hard, cancelHard := context.WithTimeout(context.Background(), e.cfg.RestoreTimeout+req.Timeout+e.cfg.Grace+time.Minute)
	defer cancelHard()
	// The run's time limit starts with its code: loading the packages it imports (and
	// /data) has its own bound, RestoreTimeout, and the process says when it is done.
	started := make(chan struct{}, 1)
	p.setStarted(func() {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	defer p.setStarted(nil)
	go func() {
		f, err := p.call(hard, msg, &o)
		done <- reply{f, err}
	}()
	timer := time.NewTimer(e.cfg.RestoreTimeout)
	defer timer.Stop()
	var rep reply
	var ctxErr error
	interrupted := false
wait:
	for {
		select {
		case rep = <-done:
		case <-started:
			// Once: a second word from the process (which user code can forge) never
			// extends the limit.
			timer.Reset(req.Timeout)
			started = nil
			continue
		case <-timer.C:
			interrupted = true
		case <-ctx.Done():
			interrupted, ctxErr = true, ctx.Err()
		}
		break wait
	}
	if interrupted {
		p.interrupt()
		select {
		case rep = <-done:
		case <-time.After(e.cfg.Grace):
			// The code ignored KeyboardInterrupt: kill its process, and with it every
			// thread it started. The session goes back to its last durable state.
			e.dropLive(key, lv, "the run ignored the interrupt")
			<-done
			res := Result{RunOutcome: sandchat.RunOutcome{Status: StatusTimeout, ExecutionMS: time.Since(start).Milliseconds(),
				Error: &sandchat.RunError{Type: "TimeoutError", Message: fmt.Sprintf(
					"Execution did not stop within %s of the interrupt and was terminated; the session was restored to its last saved state (version %d). Variables defined since then are lost.",
					e.cfg.Grace, lv.version)}},
				Session: session()}
			return res, ctxErr
		}
	}
	ms := time.Since(start).Milliseconds()
	if rep.err != nil {
		e.dropLive(key, lv, "the run failed")
		var pe *procError
		switch {
		case errors.Is(rep.err, errProcGone):
			return Result{RunOutcome: sandchat.RunOutcome{Status: StatusError, ExecutionMS: ms,
				Error: &sandchat.RunError{Type: "SandboxError", Message: fmt.Sprintf(
					"The session's process stopped during the run (%s); the session was restored to its last saved state (version %d).", p.reason(), lv.version)}},
				Session: session()}, ctxErr
		case errors.As(rep.err, &pe):
			return Result{RunOutcome: sandchat.RunOutcome{Status: StatusError, ExecutionMS: ms,
				Error: &sandchat.RunError{Type: "SandboxError", Message: "The session's interpreter failed and was restarted from its last saved state: " + pe.msg}},
				Session: session()}, ctxErr
		}
		return Result{}, rep.err
	}
	// The process mounted /data as sent, whatever the code then did.
	e.sess.mu.Lock()
	lv.data = versions
	e.sess.mu.Unlock()
	var r runReply
	if err := json.Unmarshal(rep.f.raw, &r); err == nil {
		err = r.check(e.cfg, rep.f)
	}
	if err != nil {
		e.dropLive(key, lv, "protocol: run reply refused")
		return Result{}, fmt.Errorf("sandbox reply: %w", err)
	}
	res := e.result(&r, rep.f, lv, notes)
	res.Displays, res.Stderr = disp.done(res.Stderr, len(notesPrefix(notes)), r.DisplaysDropped)
	res.ExecutionMS = ms
	if interrupted && res.Status == StatusTimeout && res.Error != nil {
		if ctxErr != nil {
			res.Error.Message = "Execution was cancelled."
		} else {
			res.Error.Message = fmt.Sprintf("Execution exceeded the %s time limit and was interrupted; the session keeps its state.", req.Timeout)
		}
	}
	lv.packages = r.Packages
	res.Session = session()
	res.Session.Live = true
	if res.Status != StatusSuccess {
		// A failed run never replaces the last good state; the warm interpreter keeps
		// whatever the run left, like a notebook after an exception, but its heap is no
		// longer the durable state's until the next run that succeeds.
		lv.tainted = true
		return res, ctxErr
	}
	return res, e.persist(ctx, key, token, lv, a, req, &r, &res, ctxErr)
}

// notesPrefix is what the engine says ahead of a run's stderr (how its session came
// back, packages it could not fetch).
func notesPrefix(notes []string) string {
	if len(notes) == 0 {
		return ""
	}
	return strings.Join(notes, "\n") + "\n"
}

// result turns a run reply into a Result: output with truncation markers, artifacts
// within their limits, and what happened to changed files the session keeps.
func (e *Engine) result(r *runReply, f frame, lv *live, notes []string) Result {
	res := Result{RunOutcome: sandchat.RunOutcome{Status: r.Status, Stdout: r.Stdout, Stderr: r.Stderr, Result: r.Result, Error: r.Error, Artifacts: []sandchat.Artifact{}}}
	if r.StdoutTruncated {
		res.Stdout += fmt.Sprintf("\n[... output truncated at %d bytes ...]\n", e.cfg.MaxOutput)
	}
	if r.StderrTruncated {
		res.Stderr += fmt.Sprintf("\n[... output truncated at %d bytes ...]\n", e.cfg.MaxOutput)
	}
	res.Stderr = notesPrefix(notes) + res.Stderr
	if len(r.Outside) > 0 {
		res.Stderr += "[sandbox] not kept: " + strings.Join(r.Outside, ", ") + " (only files in the working directory /home/pyodide are kept and come back; write there)\n"
	}
	var skipped, unsaved []string
	for _, c := range r.Changed {
		b := f.bytes(c.Data)
		switch {
		case c.Data == nil || c.Size > e.cfg.MaxArtifactBytes:
			skipped = append(skipped, fmt.Sprintf("%s is %s; files from a run are limited to %s each", c.Path, sandchat.Size(c.Size), sandchat.Size(e.cfg.MaxArtifactBytes)))
		case len(res.Artifacts) >= e.cfg.MaxArtifacts:
			skipped = append(skipped, fmt.Sprintf("%s: a run returns at most %d files", c.Path, e.cfg.MaxArtifacts))
		default:
			res.Artifacts = append(res.Artifacts, sandchat.Artifact{Name: c.Path, ContentType: contentType(c.Path, b), Data: b, Size: int64(len(b))})
		}
		if c.Data == nil || (len(lv.unsaved) >= maxSavedFilesPerRun && lv.unsaved[c.Path] == nil) {
			// Redis is no place for big files: they live on in the warm session only.
			unsaved = append(unsaved, c.Path)
			continue
		}
		lv.unsaved[c.Path] = b
		delete(lv.unsavedDel, c.Path)
	}
	if r.Omitted > 0 {
		skipped = append(skipped, fmt.Sprintf("%d more changed files", r.Omitted))
	}
	sort.Slice(res.Artifacts, func(i, j int) bool { return res.Artifacts[i].Name < res.Artifacts[j].Name })
	if len(skipped) > 0 {
		sort.Strings(skipped)
		res.Stderr += "[sandbox] files not returned: " + strings.Join(skipped, "; ") + "\n"
	}
	if len(unsaved) > 0 {
		sort.Strings(unsaved)
		res.Stderr += fmt.Sprintf("[sandbox] not kept with the session state (over %d MiB, or too many files): %s\n",
			e.cfg.MaxArtifactBytes>>20, strings.Join(unsaved, ", "))
	}
	for _, p := range r.Deleted {
		delete(lv.unsaved, p)
		lv.unsavedDel[p] = true
	}
	return res
}

// stateCap is what a session's saved state may hold when its caller allows want.
func (e *Engine) stateCap(want int64) int64 {
	if want > 0 {
		return min(want, e.cfg.MaxStateBytes)
	}
	return e.cfg.MaxStateBytes
}

// persist makes a successful run durable before it is reported complete: its cell joins
// the session's log in Redis with the files it changed (a few hundred bytes for most
// runs). The heap is saved later, off the answer's path (checkpoint.go); until then a
// restore replays the cells logged since the last checkpoint.
func (e *Engine) persist(ctx context.Context, key, token string, lv *live, a *attached, req Request, r *runReply, res *Result, ctxErr error) error {
	deleted := make([]string, 0, len(lv.unsavedDel))
	for p := range lv.unsavedDel {
		deleted = append(deleted, p)
	}
	e.sess.mu.Lock()
	pip, _ := json.Marshal(append([]pkgs.Wheel{}, lv.pip...))
	e.sess.mu.Unlock()
	save := state.Save{
		Token: token, From: lv.version, Fresh: lv.version == 0, DropHeap: lv.heapStale, KeepHeap: true,
		Base: lv.base, Build: e.rt.build, Mode: lv.mode, Packages: r.Packages, Pip: pip,
		Changed: lv.unsaved, Deleted: deleted, Cells: append(append([]string{}, a.replayed...), e.logCell(req.Code, req.Timeout)),
		Cap: e.stateCap(req.StateCap),
	}
	e.sess.mu.Lock()
	lv.stateCap = save.Cap
	e.sess.mu.Unlock()
	v, stateBytes, err := e.st.Save(context.WithoutCancel(ctx), key, save)
	var full *state.Full
	if errors.As(err, &full) {
		// Nothing fits: the warm interpreter keeps the run's effects, but they are not
		// durable; the user is told what an eviction would take back.
		lv.tainted = true
		res.Stderr += fmt.Sprintf("[sandbox] session state not saved: %v; this run's changes live only while the session stays warm (saved version %d)\n", full, lv.version)
		return ctxErr
	}
	if err != nil {
		// The warm interpreter is now ahead of Redis: drop it, so the next run starts
		// from the last state that was saved.
		e.dropLive(key, lv, "its state could not be saved")
		e.log.ErrorContext(ctx, "save sandbox session", "session", key, "err", err)
		return sandchat.Errorf(sandchat.EUNAVAILABLE, "The code ran but its session state could not be saved; the next run continues from the last state that was saved.")
	}
	e.sess.mu.Lock()
	lv.version, lv.tainted, lv.heapStale = v, false, false
	e.sess.mu.Unlock()
	lv.unsaved, lv.unsavedDel = map[string][]byte{}, map[string]bool{}
	res.Session.Version, res.Session.Mode, res.Session.StateBytes = v, lv.mode, stateBytes
	e.scheduleCheckpoint(lv)
	return ctxErr
}

func contentType(name string, b []byte) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		sniff := http.DetectContentType(b)
		// Trust the bytes over the name when they clearly say image or archive.
		if strings.HasPrefix(sniff, "image/") || sniff == "application/pdf" || sniff == "application/zip" {
			return sniff
		}
		return t
	}
	return http.DetectContentType(b)
}

// StateBytes is what key's saved state holds in both tiers (heap, files, replay log),
// from the store's counters alone; zero when it has none.
func (e *Engine) StateBytes(ctx context.Context, key string) (int64, error) {
	return e.st.Bytes(ctx, key)
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
	for p := range st.Files {
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
	return e.withLease(ctx, key, func(string) error {
		if err := e.st.Reset(ctx, key); err != nil {
			return err
		}
		lv := e.sess.take(key)
		if lv != nil {
			lv.p.close("reset")
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

func (e *Engine) logCell(code string, timeout time.Duration) string {
	if timeout == 0 || timeout == e.cfg.Timeout {
		return code
	}
	b, _ := json.Marshal(loggedCell{Code: code, TimeoutMS: timeout.Milliseconds()})
	return "\x00" + string(b)
}

// splitCells decodes logged cells into their code and time limits in milliseconds.
func (e *Engine) splitCells(cells []string) (codes []string, timeouts []int64) {
	codes, timeouts = make([]string, 0, len(cells)), make([]int64, 0, len(cells))
	for _, c := range cells {
		lc := loggedCell{Code: c, TimeoutMS: e.cfg.Timeout.Milliseconds()}
		if strings.HasPrefix(c, "\x00") {
			if json.Unmarshal([]byte(c[1:]), &lc) != nil || lc.TimeoutMS <= 0 {
				lc = loggedCell{Code: "", TimeoutMS: e.cfg.Timeout.Milliseconds()}
			}
		}
		codes, timeouts = append(codes, lc.Code), append(timeouts, lc.TimeoutMS)
	}
	return codes, timeouts
}
