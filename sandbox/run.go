package sandbox

import (
	"context"
	"errors"
	"path"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

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
func (e *Engine) Execute(ctx context.Context, key string, req Request) (res Result, err error) {
	t0 := time.Now()
	reached := false // the run got its session's interpreter
	defer func() { e.obs.RunDone(runStatus(res, err, reached), res.Session.RestoredFrom, time.Since(t0)) }()
	if ok, why := e.Available(); !ok {
		return Result{}, sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", why)
	}
	if err := e.cfg.check(key, &req); err != nil {
		return Result{}, err
	}
	if req.Timeout == 0 {
		req.Timeout = e.cfg.Timeout
	}
	var waited time.Duration
	err = e.leases.with(ctx, key, func(ctx context.Context, token string) error {
		waited = time.Since(t0)
		var err error
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
	e.log.Debug("sandbox run", "session", key, "status", res.Status, "from", res.Session.RestoredFrom,
		"queued_ms", waited.Milliseconds(), "exec_ms", res.ExecutionMS, "total_ms", time.Since(t0).Milliseconds(), "state_bytes", res.Session.StateBytes)
	return res, err
}

// DataVersions tells which version of each file under /data the warm process of key
// on this node holds, or nil: a caller may then leave those files' Data out.
func (e *Engine) DataVersions(key string) map[string]string { return e.sess.dataVersions(key) }

// runStatus is what the Observer is told of a run Execute answered with res and err;
// reached says it got its session's interpreter.
func runStatus(res Result, err error, reached bool) string {
	switch {
	case res.Status != "" && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Interrupted runs come back with their context's error: the code's outcome.
		return res.Status
	case reached:
		return RunFailed
	}
	return RunRefused
}
