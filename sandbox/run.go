package sandbox

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// Check tells whether the engine would take req for key under c's limits (the key, the
// code's size, the time limit, the preload), for a caller that records a run before it
// asks for it. Execute checks again, and checks the files of /data when they come.
func (c Config) Check(key string, req Request) error {
	if key == "" || len(key) > 512 {
		return sandchat.Errorf(sandchat.EINVALID, "Session key must be 1 to 512 bytes.")
	}
	if len(req.Code) > c.MaxCode {
		return sandchat.Errorf(sandchat.ETOOLARGE, "Code is %d bytes; the limit is %d bytes.", len(req.Code), c.MaxCode)
	}
	if req.Timeout < 0 || req.Timeout > c.MaxTimeout {
		return sandchat.Errorf(sandchat.EINVALID, "Timeout must be between 0 and %s.", c.MaxTimeout)
	}
	return CheckPreload(req.Preload)
}

// Execute runs req.Code in the session named by key (chosen by the caller, e.g.
// "conv:42" or "conv:42/agent:7"): checked, admitted (req.User's share of the node),
// under the session's lease (one run at a time across nodes), in the session as Open
// finds it or brings it back. Cancelling ctx interrupts the running code; the
// interrupted Result comes back along with ctx's error.
func (e *Engine) Execute(ctx context.Context, key string, req Request) (res Result, err error) {
	t0 := time.Now()
	reached := false // the run got its session's interpreter
	var waited time.Duration
	defer func() {
		status, took := runStatus(res, err, reached), time.Since(t0)
		e.obs.RunDone(status, res.Session.RestoredFrom, took)
		// One line per run, at info: what an operator follows a run by (the request's id
		// comes with ctx).
		attrs := []any{"session", key, "status", status, "from", res.Session.RestoredFrom, "queued_ms", waited.Milliseconds(),
			"exec_ms", res.ExecutionMS, "total_ms", took.Milliseconds(), "state_bytes", res.Session.StateBytes}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		e.log.InfoContext(ctx, "sandbox run", attrs...)
	}()
	if ok, why := e.Available(); !ok {
		return Result{}, sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", why)
	}
	if err := e.cfg.Check(key, req); err != nil {
		return Result{}, err
	}
	req.Timeout = cmp.Or(req.Timeout, e.cfg.Timeout)
	release, err := e.adm.user(ctx, req.User)
	if err != nil {
		return Result{}, err
	}
	defer release()
	err = e.leases.with(ctx, key, func(ctx context.Context, token string) error {
		waited = time.Since(t0)
		s, err := session.Open(ctx, e.env, key, e.sess.get(key), req)
		if err != nil {
			return err
		}
		reached = true
		res, err = s.Run(ctx, token, req)
		e.res.ran()
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
	return res, err
}

// refused are the errors of a run refused for what it asked (its files under /data, say,
// known only once the session asks for them): it never started.
var refused = map[string]bool{sandchat.EINVALID: true, sandchat.ETOOLARGE: true, sandchat.EBUSY: true}

// runStatus is what the Observer is told of a run Execute answered with res and err;
// reached says it got its session's interpreter.
func runStatus(res Result, err error, reached bool) string {
	switch {
	case res.Status != "" && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Interrupted runs come back with their context's error: the code's outcome.
		return res.Status
	case reached && !refused[sandchat.ErrorCode(err)]:
		return RunFailed
	}
	return RunRefused
}
