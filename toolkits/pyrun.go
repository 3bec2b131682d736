package toolkits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// RunRequest is one run. AgentID is the agent whose settings allow it (nil for a
// conversation without one); TurnID ties it to an assistant turn.
type RunRequest struct {
	ConversationID int64
	AgentID        *int64
	TurnID         *int64
	Code           string
	Preload        []string // modules imported before the code (the agent's)
	Timeout        time.Duration
	OnOutput       func(stream, chunk string)
	// OnDisplay receives display items as the code shows them; an image's file id is
	// only known once the run is stored (Run.Displays).
	OnDisplay func(sandchat.Display)
}

// Run is a run's outcome as the API and the model see it.
type Run struct {
	ID int64 `json:"id"`
	sandbox.Result
	Artifacts []conversations.FileRef `json:"artifacts"`
	// DataFiles lists the conversation's files under /data for this run, with sizes.
	DataFiles []string `json:"data_files"`
	// Notice tells the caller something it must know about the record of the run (it
	// ran, but its audit row is still being written).
	Notice string `json:"notice,omitempty"`
}

// dataFiles is the conversation's uploads as the engine takes them: bytes only for the
// versions have does not name.
func (s *Sandbox) dataFiles(ctx context.Context, convID int64, have map[string]string) ([]sandbox.File, error) {
	uploads, err := s.Store.DataFiles(ctx, convID, have)
	if err != nil {
		return nil, err
	}
	if workbooksHeldWithoutCopies(uploads, have) {
		// Workbooks' sheets are mounted as CSV copies (sheetcopies.go), made from their bytes.
		if uploads, err = s.Store.DataFiles(ctx, convID, withoutWorkbooks(have)); err != nil {
			return nil, err
		}
	}
	data := make([]sandbox.File, 0, len(uploads))
	for _, f := range uploads {
		if sandchat.CheckDataPath(f.Name) != nil {
			// Stored before the name rules of today (a hidden character, say): it is not
			// mounted, so the conversation's code still runs; the file can be renamed
			// by uploading it again, or deleted.
			s.log().WarnContext(ctx, "upload not mounted: its name is no longer accepted", "conversation", convID, "name", fmt.Sprintf("%q", f.Name))
			continue
		}
		data = append(data, sandbox.File{Name: f.Name, Version: f.Version, Size: f.Size, Data: f.Data})
	}
	room := s.Engine.Config().MaxDataBytes
	for _, f := range data {
		room -= f.Size
	}
	return append(data, s.sheetCopies(ctx, uploads, have, room)...), nil
}

// Execute runs code. The caller has checked that the sandbox is on for the agent; the
// user in ctx is charged against the execution rate limit, and their runs hold at most
// their share of the node's processes (the engine waits for it).
//
// The run is recorded as pending before it starts, so Postgres being down refuses the
// run (503) instead of running it unrecorded; after the run its outcome is written
// with retries. A run whose session state advanced is never reported as failed: if
// its outcome cannot be written yet, the caller gets the result with a notice, and the
// write goes on in the background. A run the engine answers without having saved its
// state is recorded failed and answered 503: replay never applies what the caller was
// told failed. The run is a span of the caller's trace.
func (s *Sandbox) Execute(ctx context.Context, req RunRequest) (Run, error) {
	ctx, span := s.tracer().Start(ctx, "sandbox run", trace.WithAttributes(attribute.Int64("sandchat.conversation_id", req.ConversationID),
		attribute.String("sandchat.session", s.SessionKey(req.ConversationID, req.AgentID))))
	defer span.End()
	run, err := s.execute(ctx, req)
	if err != nil {
		span.SetStatus(codes.Error, sandchat.ErrorMessage(err))
	} else {
		span.SetAttributes(attribute.String("sandchat.run_status", run.Result.Status), attribute.String("sandchat.restored_from", run.Result.Session.RestoredFrom))
	}
	return run, err
}

func (s *Sandbox) execute(ctx context.Context, req RunRequest) (Run, error) {
	if s.Engine == nil {
		return Run{}, errNoEngine
	}
	select {
	case <-s.cutCh():
		return Run{}, errCutOff
	default:
	}
	if s.Limiter != nil {
		if err := s.Limiter.Allow(ctx, "executions"); err != nil {
			return Run{}, err
		}
	}
	key := s.SessionKey(req.ConversationID, req.AgentID)
	var mounted []sandbox.File // what the engine asked for, for the answer
	sreq := sandbox.Request{Code: req.Code, Preload: req.Preload, Timeout: req.Timeout, OnOutput: req.OnOutput, OnDisplay: req.OnDisplay,
		User: userOf(ctx),
		// Uploads travel once: only those the session's warm process does not hold.
		Data: func(ctx context.Context, held map[string]string) (files []sandbox.File, err error) {
			files, err = s.dataFiles(ctx, req.ConversationID, held)
			mounted = files
			return files, err
		}}
	// A run the engine would refuse (code too long, a time limit past the maximum) is
	// refused before anything of it is stored.
	if err := s.Engine.Config().Check(key, sreq); err != nil {
		return Run{}, err
	}
	quota := &runQuota{}
	ex := conversations.Execution{ConversationID: req.ConversationID, TurnID: req.TurnID, AgentID: req.AgentID, SessionKey: key, Code: req.Code}
	id, err := s.Store.BeginExecution(ctx, ex)
	if err != nil {
		return Run{}, err
	}
	// The record must not be lost to a client that went away mid-run.
	wctx := context.WithoutCancel(ctx)
	sreq.Budget = s.budget(req.ConversationID, key, quota)
	r, later := s.call(func() (sandbox.Result, error) { return s.Engine.Execute(ctx, key, sreq) })
	if later != nil {
		s.background.Go(func() { s.recordLate(ctx, wctx, id, ex, quota, <-later) })
		return Run{}, &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2, Message: fmt.Sprintf(
			"The server shut down before the run finished, and stops it now; check its outcome (GET /api/v1/conversations/%d/sandbox/executions/%d) before running it again.",
			req.ConversationID, id)}
	}
	run, err := s.answer(ctx, wctx, id, ex, quota, r)
	if err == nil {
		run.DataFiles = dataList(mounted)
	}
	return run, err
}

// userOf is the user in ctx as the engine counts their runs ("" for none).
func userOf(ctx context.Context) string {
	if uid := sandchat.UserIDFromContext(ctx); uid != 0 {
		return strconv.FormatInt(uid, 10)
	}
	return ""
}

// answer records the engine's reply r to run id and returns what its caller gets.
func (s *Sandbox) answer(ctx, wctx context.Context, id int64, ex conversations.Execution, quota *runQuota, r engineReply) (Run, error) {
	res, err := r.res, r.err
	if res.Session.ResetFrom > 0 {
		// The engine reset a session whose saved state could not run: a replay of the
		// history must never bring that state back.
		if rerr := s.Store.RecordReset(wctx, ex.ConversationID, ex.SessionKey, id); rerr != nil {
			s.log().ErrorContext(ctx, "record the engine's reset of a session", "session", ex.SessionKey, "err", rerr)
		}
	}
	ex = s.underQuota(&res, ex, quota)
	if err != nil && res.Status == sandbox.StatusSuccess && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The code ended as it was being stopped, and its state was saved: it succeeded,
		// and is answered so, as its record says.
		err = nil
	}
	if err != nil && res.Status != "" && errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The request's own time limit passed while the code ran: the code was
		// interrupted as at its time limit, and the session keeps what it did. That is
		// the run's outcome, recorded and answered as such: "try again" would run it twice.
		if res.Status == sandbox.StatusTimeout && res.Error != nil {
			res.Error.Message = "The request's time limit passed while the code ran (the wait for the session included): it was interrupted, and the session keeps its state."
		}
		err = nil
	}
	if err != nil {
		if !stopped(ctx, res, err) {
			_, err = s.failed(ctx, wctx, id, ex, res, err)
			return Run{}, err
		}
		// Recorded as stopped, and returned with the error: its caller went away, but
		// what it printed and showed before is kept as it was.
		res.Status = RunStopped
		var shutdown *sandchat.ShutdownError
		if errors.As(context.Cause(ctx), &shutdown) || s.closing.Load() {
			// Stopped by the server's shutdown: an interrupted run's state is never saved,
			// so the session comes back as it was before this run.
			res.Error = &sandchat.RunError{Type: ErrServerRestart, Message: serverRestarted}
		}
		files, err := s.failed(ctx, wctx, id, ex, res, err)
		return Run{ID: id, Result: res, Artifacts: linkDisplayImages(res, files)}, err
	}
	ex = finished(ex, withDisplayImages(res))
	files, notKept, err := s.finish(wctx, id, ex, "")
	if err != nil {
		run := Run{ID: id, Result: res, Artifacts: make([]conversations.FileRef, 0, len(res.Artifacts)),
			Notice: "The code ran and its session state is saved, but its record could not be written yet (" +
				sandchat.ErrorMessage(err) + "); it is being retried. Do not run it again."}
		for _, a := range res.Artifacts {
			run.Artifacts = append(run.Artifacts, conversations.FileRef{Name: a.Name, ContentType: a.ContentType, Size: int64(len(a.Data))})
		}
		s.finishLater(wctx, id, ex, "")
		return run, nil
	}
	// The record's stderr says which files did not fit in the quota; so does the answer.
	res.Stderr += notKept
	files = linkDisplayImages(res, files)
	if files == nil {
		files = []conversations.FileRef{}
	}
	return Run{ID: id, Result: res, Artifacts: files}, nil
}

// ErrServerRestart is the error type of a run the server's shutdown stopped: unlike a
// user's Stop, its session does not keep what it did.
const ErrServerRestart = "ServerRestart"

const serverRestarted = "The server restarted during this run and stopped it. The session went back to its last saved state, from before this cell: what the cell did (its variables, imports and files) is not kept. Run it again to redo it."

// RunStopped is the status of a run its caller stopped (the user's Stop, a cancelled
// turn). The engine interrupts it as it does a run past its time limit and reports
// both as timeouts; a timeout is kept for the limit.
const RunStopped = "stopped"

// stopped reports whether the engine interrupted a run because its caller's context
// was cancelled, not because a deadline passed.
func stopped(ctx context.Context, res sandbox.Result, err error) bool {
	return res.Status != "" && errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// engineReply is what the engine answered to a run.
type engineReply struct {
	res sandbox.Result
	err error
}

// call runs a run on the engine. Once the shutdown cuts runs off (CutOff), a run the
// engine still holds (code ignoring its interrupt) is not waited for: later delivers
// its outcome when the engine lets go of it.
func (s *Sandbox) call(run func() (sandbox.Result, error)) (r engineReply, later <-chan engineReply) {
	done := make(chan engineReply, 1)
	go func() {
		res, err := run()
		done <- engineReply{res, err}
	}()
	select {
	case r = <-done:
		return r, nil
	case <-s.cutCh():
		select {
		case r = <-done:
			return r, nil
		default:
			return engineReply{}, done
		}
	}
}

// failed records a run the engine did not complete, and returns the files stored with
// it (an interrupted run keeps its artifacts and images) and the error for its caller.
func (s *Sandbox) failed(ctx, wctx context.Context, id int64, ex conversations.Execution, res sandbox.Result, err error) ([]conversations.FileRef, error) {
	// A result comes with the context's error when the run was interrupted, and then
	// the session keeps what the run did; with any other error the code ran but the
	// engine could not save its state and went back to the last one saved.
	notKept := res.Status != "" && (ctx.Err() == nil || !errors.Is(err, ctx.Err()))
	reason := sandchat.ErrorMessage(err)
	switch {
	case notKept:
		// Recorded failed, with what it printed, so no replay applies it; the files it
		// wrote went with its state.
		ex = finished(ex, res)
		ex.Outcome.Artifacts, ex.Outcome.Displays = nil, nil
		reason, err = errNotKept.Message, errNotKept
	case res.Status != "":
		// The engine still reports what the run did (interrupted code keeps its
		// state): record that, not a failure.
		ex, reason = finished(ex, withDisplayImages(res)), ""
	case ctx.Err() != nil:
		reason = "The run was stopped: " + context.Cause(ctx).Error() + "."
	case s.closing.Load():
		reason = "The server shut down during the run, which was cut off; run it again."
		err = sandchat.Errorf(sandchat.EUNAVAILABLE, "%s", reason)
	}
	files, _, ferr := s.finish(wctx, id, ex, reason)
	if ferr != nil {
		s.log().WarnContext(ctx, "record failed run", "execution_id", id, "err", ferr)
		s.finishLater(wctx, id, ex, reason)
	}
	return files, err
}

// recordLate records the outcome of a run whose caller was answered before the engine
// let go of it.
func (s *Sandbox) recordLate(ctx, wctx context.Context, id int64, ex conversations.Execution, quota *runQuota, r engineReply) {
	ex = s.underQuota(&r.res, ex, quota)
	if r.err != nil {
		_, _ = s.failed(ctx, wctx, id, ex, r.res, r.err)
		return
	}
	ex = finished(ex, withDisplayImages(r.res))
	if _, _, err := s.finish(wctx, id, ex, ""); err != nil {
		s.log().WarnContext(ctx, "record run", "execution_id", id, "err", err)
	}
}

func dataList(data []sandbox.File) []string {
	out := make([]string, 0, len(data))
	for _, f := range data {
		out = append(out, fmt.Sprintf("/data/%s (%d bytes)", f.Name, max(f.Size, int64(len(f.Data)))))
	}
	return out
}

// withDisplayImages returns the result to store: its artifacts plus the images of its
// display items that are no artifact, each under the name the engine gave it, so every
// image shown has a file id. A figure that plt.show() also saved is stored once.
func withDisplayImages(res sandbox.Result) sandbox.Result {
	stored := map[string]bool{}
	for _, a := range res.Artifacts {
		stored[a.Name] = true
	}
	arts := slices.Clone(res.Artifacts)
	for _, d := range res.Displays {
		if img := d.Image; img != nil && !stored[img.Name] {
			stored[img.Name] = true
			arts = append(arts, sandchat.Artifact{Name: img.Name, ContentType: img.ContentType, Data: img.Data, Size: img.Size})
		}
	}
	res.Artifacts = arts
	return res
}

// finished is the record of a run the engine answered: its outcome and the session it
// left.
func finished(ex conversations.Execution, res sandbox.Result) conversations.Execution {
	ex.Outcome, ex.SessionVersion, ex.RestoredFrom = res.RunOutcome, res.Session.Version, res.Session.RestoredFrom
	return ex
}

// linkDisplayImages gives each displayed image its file id (the engine names images and
// artifacts as they are stored), and returns the run's artifacts without the files that
// exist only as display images.
func linkDisplayImages(res sandbox.Result, files []conversations.FileRef) []conversations.FileRef {
	if len(res.Displays) == 0 {
		return files
	}
	byName := map[string]conversations.FileRef{}
	for _, f := range files {
		byName[f.Name] = f
	}
	artifact := map[string]bool{}
	for _, a := range res.Artifacts {
		artifact[a.Name] = true
	}
	shown := map[string]bool{}
	for _, d := range res.Displays {
		if d.Image == nil {
			continue
		}
		if f, ok := byName[d.Image.Name]; ok {
			d.Image.FileID = f.ID
		}
		if !artifact[d.Image.Name] {
			shown[d.Image.Name] = true
		}
	}
	return slices.DeleteFunc(files, func(f conversations.FileRef) bool { return shown[f.Name] })
}

func (s *Sandbox) finish(ctx context.Context, id int64, ex conversations.Execution, failure string) (files []conversations.FileRef, notKept string, err error) {
	err = finishWait.Retry(ctx, func() (err error) {
		files, notKept, err = s.Store.FinishExecution(ctx, id, ex, failure)
		return err
	}, sandchat.IsUnavailable)
	if err != nil {
		return nil, "", err
	}
	if notKept != "" {
		s.refused(RefusedArtifacts)
	}
	return files, notKept, nil
}

// finishLater keeps writing a run's outcome (failure: why it failed, if it did) until it
// is stored, or for an hour, after which the row stays pending and the logs say which.
func (s *Sandbox) finishLater(ctx context.Context, id int64, ex conversations.Execution, failure string) {
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		later := sandchat.Backoff{Initial: 2 * time.Second, Max: 2 * time.Second, For: time.Hour}
		err := later.Retry(ctx, func() error {
			_, _, err := s.Store.FinishExecution(ctx, id, ex, failure)
			return err
		}, func(err error) bool { return sandchat.IsUnavailable(err) && !s.abandoned.Load() })
		switch {
		case err == nil:
			s.log().InfoContext(ctx, "execution recorded after retries", "execution_id", id)
		case !sandchat.IsUnavailable(err):
			s.log().ErrorContext(ctx, "record execution", "execution_id", id, "err", err)
		default:
			s.log().ErrorContext(ctx, "execution left pending: its outcome could not be written", "execution_id", id)
		}
	}()
}
