// Package pgcold keeps the cold tier of the sandbox's session state in Postgres: a
// session's heap and larger files, named by content hash within the session (table
// sandbox_blobs, migration 008). Errors are translated at the boundary by pgdb: an
// unreachable Postgres is sandchat's "unavailable" naming Postgres.
package pgcold

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// Store is the cold tier in one Postgres database.
type Store struct {
	db  *pgdb.Pool
	ttl time.Duration
	// swept is when blobs no save used for longer than ttl were last removed (unix ns).
	swept atomic.Int64
}

// New keeps blobs in db; a blob no save has used for ttl (the sessions' TTL) is removed.
func New(db *pgdb.Pool, ttl time.Duration) *Store { return &Store{db: db, ttl: ttl} }

// Put stores a blob, or marks one already stored as in use.
func (s *Store) Put(ctx context.Context, session, hash string, data []byte) error {
	_, err := s.db.Exec(ctx, `insert into sandbox_blobs (session, hash, size, data) values ($1, $2, $3, $4)
		on conflict (session, hash) do update set touched_at = now()`, session, hash, len(data), data)
	if err != nil {
		return pgdb.PgError(err, "session state")
	}
	s.sweep(ctx)
	return nil
}

// Get returns a blob of session.
func (s *Store) Get(ctx context.Context, session, hash string) ([]byte, error) {
	var data []byte
	err := s.db.QueryRow(ctx, `select data from sandbox_blobs where session = $1 and hash = $2`, session, hash).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		// Most often a checkpoint replaced it a moment ago (the state read before it named
		// the old one): the next try reads the new state. If it stays, only a reset helps.
		return nil, &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2, Message: fmt.Sprintf(
			"This Python session's saved state names a stored part (%.12s) that is not there; try again, and if this persists, reset the session.", hash)}
	}
	if err != nil {
		return nil, pgdb.PgError(err, "session state")
	}
	return data, nil
}

// Keep drops the session's blobs other than keep and marks those as in use.
func (s *Store) Keep(ctx context.Context, session string, keep []string) error {
	if keep == nil {
		keep = []string{}
	}
	if _, err := s.db.Exec(ctx, `delete from sandbox_blobs where session = $1 and not (hash = any($2))`, session, keep); err != nil {
		return pgdb.PgError(err, "session state")
	}
	if len(keep) > 0 {
		if _, err := s.db.Exec(ctx, `update sandbox_blobs set touched_at = now() where session = $1 and hash = any($2)`, session, keep); err != nil {
			return pgdb.PgError(err, "session state")
		}
	}
	return nil
}

// sweep removes, at most once an hour per process, the blobs of sessions that have not
// been saved for longer than their TTL: their hot state in Redis has expired with them.
func (s *Store) sweep(ctx context.Context) {
	now := time.Now()
	last := s.swept.Load()
	if s.ttl <= 0 || now.UnixNano()-last < int64(time.Hour) || !s.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_, _ = s.db.Exec(context.WithoutCancel(ctx), `delete from sandbox_blobs where touched_at < $1`, now.Add(-s.ttl))
}
