package sandbox

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// Observer hears what the engine does, for an operator's metrics. The engine calls it
// from its own goroutines, often with a session's lock held: a method must return at
// once, never block and never call back into the engine. Gauges (live sessions,
// processes, the pool, waiting runs, availability) are read from Status instead.
type Observer interface {
	// RunDone is called once for every run Execute took, with the run's status
	// (StatusSuccess, StatusError, StatusTimeout, or RunFailed and RunRefused for a run
	// answered with an error), where its interpreter came from (FromLive … FromFresh, or
	// "" when it never reached one) and how long the run took, from its check to its
	// answer.
	RunDone(status, restoredFrom string, took time.Duration)
	// AdmissionWaited is called for each run that needed a session process, with how
	// long it waited for room on the node (zero when there was room at once).
	AdmissionWaited(took time.Duration)
	// Restored is called each time a session is brought into a process that did not
	// hold it (from FromSnapshot, FromReplay or FromFresh), with how long that took.
	Restored(from string, took time.Duration)
	// Checkpointed is called for each heap checkpoint the engine attempted, with err
	// nil when it was saved.
	Checkpointed(took time.Duration, err error)
	// ProcessStarted is called for each session process started (pool and spares too).
	ProcessStarted()
	// OOMKilled is called for each session process the kernel killed for its memory cap.
	OOMKilled()
	// SessionReset is called for each session reset: by its user (ResetByUser) or by
	// the engine, when its saved state could not run once restored (ResetBroken).
	SessionReset(cause string)
}

// RunDone statuses beyond a run's own.
const (
	// RunFailed: the run was attempted but answered with an error (its process died,
	// its state could not be saved, the engine stopped).
	RunFailed = "failed"
	// RunRefused: the run never started (busy, too large, unavailable).
	RunRefused = "refused"
)

// SessionReset causes.
const (
	ResetByUser = session.ResetByUser
	ResetBroken = session.ResetBroken
)

// WithObserver has the engine tell o what it does.
func WithObserver(o Observer) Option { return func(e *Engine) { e.obs = o } }

// WithTracer has the engine make spans of each run's steps, in the trace of the
// run's context: the wait for a process (sandbox admission), bringing its session
// back (sandbox restore), its code (sandbox execute), and each heap checkpoint
// (sandbox checkpoint; one off the runs' path starts a trace of its own).
func WithTracer(t trace.Tracer) Option { return func(e *Engine) { e.tracer = t } }

// noObserver is the engine's Observer when none is given.
type noObserver struct{}

func (noObserver) RunDone(string, string, time.Duration) {}
func (noObserver) AdmissionWaited(time.Duration)         {}
func (noObserver) Restored(string, time.Duration)        {}
func (noObserver) Checkpointed(time.Duration, error)     {}
func (noObserver) ProcessStarted()                       {}
func (noObserver) OOMKilled()                            {}
func (noObserver) SessionReset(string)                   {}
