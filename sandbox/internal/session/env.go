package session

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Env is what a session is handed by the node it lives on: its limits, and its
// collaborators as small interfaces. The node builds it once; sessions only read it.
type Env struct {
	Limits   Limits
	Procs    Processes
	Store    Store
	Packages Packages // nil: packages come only from the Pyodide distribution
	History  History  // nil: a session the store lost starts fresh
	Obs      Observer
	Tracer   trace.Tracer // nil: no spans
	// Adopt makes s, just brought back into a process, the node's session of key; false
	// once the node is shut down (nothing would ever stop its process).
	Adopt func(key string, s *Session) bool
	// Lease runs fn holding key's lease, as a run holds it: a checkpoint off the runs'
	// path takes it so no run (on any node) moves the session meanwhile.
	Lease func(ctx context.Context, key string, fn func(ctx context.Context, token string) error) error
	Build string // the runtime's build: a heap is only meaningful to the build that saved it
	Log   *slog.Logger
}

// Limits are the engine's settings a session keeps to.
type Limits struct {
	Timeout          time.Duration // a run's, unless it asks for its own
	Grace            time.Duration // how long code may ignore the interrupt before its process is killed
	RestoreTimeout   time.Duration // bounds each step of bringing a session back
	MaxOutput        int
	MaxArtifacts     int
	MaxArtifactBytes int64
	MaxDisplays      int
	MaxDisplayBytes  int64
	MaxDataBytes     int64 // what a run's files under /data may total
	MaxStateBytes    int64
	CheckpointDelay  time.Duration
	SessionTTL       time.Duration
	ForceReplay      bool
	PipOff           bool // micropip is turned off by the operator
}

// Processes are the node's session processes, started within its bounds.
type Processes interface {
	// Ready is a process holding the base interpreter, for a new session or one rebuilt
	// by replay. wait bounds the wait for room on the node, which waited adds to; ctx
	// bounds the start.
	Ready(wait, ctx context.Context, waited *time.Duration) (*proc.Process, error)
	// Primed is a process primed with the base snapshot named base, for a saved heap to
	// be loaded in it; a *proc.Error when that base is gone.
	Primed(wait, ctx context.Context, waited *time.Duration, base string) (*proc.Process, error)
	// Base names the base snapshot new sessions start from.
	Base() string
}

// Packages is the node's package fetcher (internal/pkgs).
type Packages interface {
	Begin(v *pkgs.View) *pkgs.Load
	Install(ctx context.Context, r *pkgs.Load, req pkgs.Request, have map[string]bool) (*pkgs.Plan, error)
	FetchWheel(ctx context.Context, r *pkgs.Load, w pkgs.Wheel, limit int64) error
}

// Store keeps sessions' states (sandbox/redisstore); errors come in sandchat's
// vocabulary, with state.ErrFenced and *state.Full for a save that must not land.
type Store interface {
	Version(ctx context.Context, session string) (int64, error)
	Seen(ctx context.Context, session string) (bool, error)
	Load(ctx context.Context, session string, withCells bool) (*state.State, error)
	Cells(ctx context.Context, session string) ([]string, error)
	// Bytes is what the saved states of the sessions hold together, in one round trip.
	Bytes(ctx context.Context, sessions ...string) (int64, error)
	Save(ctx context.Context, session string, r state.Save) (version, total int64, err error)
	Checkpoint(ctx context.Context, session string, c state.Checkpoint) (total int64, err error)
	// Reset forgets the session's state; seen keeps it marked as one that had a state.
	Reset(ctx context.Context, session string, seen bool) error
}

// History is the record of sessions' runs kept outside the engine (the conversations'
// execution log in Postgres). When the store lost a session that did not expire, it is
// rebuilt by running again the successful runs History returns.
type History interface {
	SessionRuns(ctx context.Context, session string) ([]sandchat.SessionRun, error)
}

// Observer hears what sessions do, for an operator's metrics (sandbox.Observer).
type Observer interface {
	AdmissionWaited(took time.Duration)
	Restored(from string, took time.Duration)
	Checkpointed(took time.Duration, err error)
	SessionReset(cause string)
}

// Reset causes (sandbox.Observer).
const (
	ResetByUser = "user"
	ResetBroken = "broken"
)

const (
	modeSnapshot = state.ModeSnapshot
	modeReplay   = state.ModeReplay
)

// MaxChangedFiles bounds the files a run reports as changed; more are only counted.
const MaxChangedFiles = 1000

// maxSavedFilesPerRun bounds how many working-directory files one save may write.
const maxSavedFilesPerRun = MaxChangedFiles

var errFenced = state.ErrFenced

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
