package session

import (
	"context"
	"time"

	"github.com/sandchat/sandchat"
)

// Request is one run of Python code in a session.
type Request struct {
	Code string
	// Timeout of this run; zero means Config.Timeout, more than Config.MaxTimeout is refused.
	Timeout time.Duration
	// Data, when set, gives the files Python sees read-only under /data for this run.
	// The session calls it under the run's lease, before any code runs, with what its
	// process holds already (name → version; nil: nothing): a File whose Version is held
	// may come without its Data, and is not sent again.
	Data func(ctx context.Context, held map[string]string) ([]File, error)
	// User is who asks for the run: one user's runs hold at most a share of the node's
	// processes; empty (an operator's command) is not counted.
	User string
	// OnOutput, when set, receives stdout/stderr chunks while the code runs. It is called
	// from the engine's reader goroutine: it must not block.
	OnOutput func(stream, chunk string)
	// OnDisplay, when set, receives each display item (display(), a rich trailing
	// expression, a matplotlib figure) as the code shows it, after the output printed
	// before it. Same goroutine rules as OnOutput. Result.Displays holds them all.
	OnDisplay func(sandchat.Display)
	// Preload names modules the session imports before the code (e.g. an agent's usual
	// packages); they are resolved and fetched like the code's own imports. A module
	// that does not import is reported in stderr and the code runs anyway.
	Preload []string
	// Budget, when set, bounds what the session's saved state (heap, files and replay
	// log together) may hold with what its caller keeps beside it.
	Budget Budget
}

// Budget is storage a session's state shares with what its caller keeps beside it (a
// conversation's quota: its files, its other sessions). The engine calls Reserve just
// before each write of the session's state that a run leads to — the run's own save,
// and each checkpoint of its heap until the session's next run brings a budget of its
// own — and the write may take room bytes (none, if room is zero or less); every other
// write on the same storage waits until the engine calls release, once this one is
// made or refused. A write Reserve fails is not made: the state saved before stays.
// Config.MaxStateBytes bounds the state either way, and a save over room is refused
// like one over it.
//
// Reserve is called with the session's lease held (or for a session no run can reach
// any more: evicted, shutting down), never with a reservation held, and from any
// goroutine; it must not wait for a session's lease.
type Budget struct {
	Reserve func(ctx context.Context) (room int64, release func(), err error)
}

// File is a named blob handed to Python. Version names its content (anything that
// changes when the content does; empty: the engine hashes Data). A File with a Version
// and no Data stands for the content the session's process already holds at that
// version (Request.Data): uploads that did not change are not sent again.
type File struct {
	Name    string
	Version string
	Size    int64 // of the content, when Data is left out
	Data    []byte
}

// Run statuses (sandchat.RunOutcome's).
const (
	StatusSuccess = sandchat.StatusSuccess
	StatusError   = sandchat.StatusError
	StatusTimeout = sandchat.StatusTimeout
)

// Where a session's interpreter came from for a run.
const (
	FromLive     = "live"     // the Worker was already warm and current
	FromSnapshot = "snapshot" // restored from the heap saved in Redis
	FromReplay   = "replay"   // rebuilt by replaying successful cells (compiled extensions, JS objects)
	FromFresh    = "fresh"    // a new interpreter: first run, reset, or expired
)

// Result is the outcome of a run and the session it left. A Python exception is a
// Result with Status "error", not a Go error: Go errors are for runs that could not be
// attempted or saved.
type Result struct {
	sandchat.RunOutcome
	Session SessionInfo `json:"session"`
}

// SessionInfo describes a session's durable state.
type SessionInfo struct {
	Version      int64     `json:"version"`
	RestoredFrom string    `json:"restored_from,omitempty"`
	Packages     []string  `json:"packages"`
	Expired      bool      `json:"expired,omitempty"` // the previous state timed out: setup must be re-run
	Mode         string    `json:"mode,omitempty"`    // snapshot | replay
	Files        []string  `json:"files,omitempty"`
	Live         bool      `json:"live"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
	// ResetFrom, for a run's Result, is the version of a saved state that could not run
	// once restored: the engine reset the session, and that state is lost (recover.go).
	ResetFrom int64 `json:"reset_from,omitempty"`
	// StateBytes is what the saved state holds (after the run, for a run's Result, saved
	// or not).
	StateBytes int64 `json:"state_bytes,omitempty"`
	// NotSaved, for a run's Result, says its state was refused for room (over the
	// session's limit or its Budget): its changes live only while the session stays warm.
	NotSaved bool `json:"-"`
}
