package sandbox

import (
	"context"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/session"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Store is where the engine keeps what outlives a process: each session's state and
// replay log, the lease that serialises its runs across nodes, and the shared base
// snapshot. sandbox/redisstore is the implementation; errors come back already in
// sandchat's vocabulary (an unreachable store is "unavailable"), with state.ErrFenced
// and *state.Full for a save that must not land.
type Store interface {
	sessionStore
	leaseStore
	baseStore
}

type sessionStore interface {
	session.Store // what a session reads and writes of its own state
	// Forget deletes the session for good, in every tier; no run that began before it
	// can save it back.
	Forget(ctx context.Context, session string) error
}

type leaseStore interface {
	Admit(ctx context.Context, session, token string, depth int, stale time.Duration) (bool, error)
	Leave(ctx context.Context, session, token string) error
	Acquire(ctx context.Context, session, token string, ttl time.Duration) error
	Renew(ctx context.Context, session, token string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, session, token string) error
}

type baseStore interface {
	BaseFor(ctx context.Context, build string) (string, error)
	LoadBase(ctx context.Context, hash string) ([]byte, error)
	PublishBase(ctx context.Context, build, hash string, snap []byte) (string, error)
}

const (
	modeSnapshot = state.ModeSnapshot
	modeReplay   = state.ModeReplay
)

var newToken = state.NewToken
