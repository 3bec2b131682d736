// Package pgcold keeps the cold tier of the sandbox's session state in Postgres: a
// session's heap and larger files, named by content hash within the session (table
// sandbox_blobs, migrations 008 and 010). Errors are translated at the boundary by pgdb:
// an unreachable Postgres is sandchat's "unavailable" naming Postgres.
//
// Each blob belongs to one deployment (its owner, the Redis prefix whose sessions name
// it): deployments may share a database, and each sweeps only its own blobs. A blob is
// written once: storing or keeping it again writes nothing, except to renew its
// touched_at once it is older than a fraction of the TTL, so a session saved every few
// seconds costs Postgres no dead rows for what did not change.
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

// Store is the cold tier of one deployment in one Postgres database.
type Store struct {
	db    *pgdb.Pool
	owner string
	ttl   time.Duration
	// renew is how stale a blob in use may grow before a save renews its touched_at.
	renew time.Duration
	// swept is when blobs no save used for longer than ttl were last removed (unix ns).
	swept atomic.Int64
}

// New keeps the blobs of deployment owner (its Redis prefix) in db; a blob of owner that
// no save has used for ttl (the sessions' TTL) is removed.
func New(db *pgdb.Pool, owner string, ttl time.Duration) *Store {
	renew := time.Hour
	if ttl > 0 {
		renew = min(ttl/4, time.Hour)
	}
	return &Store{db: db, owner: owner, ttl: ttl, renew: renew}
}

// Put stores a blob, or marks one already stored as in use (writing nothing while its
// mark is fresh).
func (s *Store) Put(ctx context.Context, session, hash string, data []byte) error {
	var stale bool
	err := s.db.QueryRow(ctx, `select touched_at < now() - $3::interval or owner <> $4 from sandbox_blobs where session = $1 and hash = $2`,
		session, hash, s.renew, s.owner).Scan(&stale)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_, err = s.db.Exec(ctx, `insert into sandbox_blobs (owner, session, hash, size, data) values ($1, $2, $3, $4, $5)
			on conflict (session, hash) do nothing`, s.owner, session, hash, len(data), data)
	case err == nil && stale:
		err = s.touch(ctx, session, []string{hash})
	}
	if err != nil {
		return pgdb.PgError(err, "session state")
	}
	s.sweep(ctx)
	return nil
}

// touch renews the mark of the session's blobs named, those whose mark is stale only.
func (s *Store) touch(ctx context.Context, session string, hashes []string) error {
	_, err := s.db.Exec(ctx, `update sandbox_blobs set touched_at = now(), owner = $3
		where session = $1 and hash = any($2) and (touched_at < now() - $4::interval or owner <> $3)`, session, hashes, s.owner, s.renew)
	return err
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
		if err := s.touch(ctx, session, keep); err != nil {
			return pgdb.PgError(err, "session state")
		}
	}
	return nil
}

// sweep removes, at most once an hour per process, this deployment's blobs of sessions
// that have not been saved for longer than their TTL: their hot state in Redis has
// expired with them. A blob in use is marked at most renew before the session's last
// save, hence the margin. Another deployment's blobs are never this one's to judge.
func (s *Store) sweep(ctx context.Context) {
	now := time.Now()
	last := s.swept.Load()
	if s.ttl <= 0 || now.UnixNano()-last < int64(time.Hour) || !s.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_, _ = s.db.Exec(context.WithoutCancel(ctx), `delete from sandbox_blobs
		where touched_at < $2 and (owner = $1 or (owner = '' and starts_with(session, $1)))`, s.owner, now.Add(-s.ttl-s.renew))
}
