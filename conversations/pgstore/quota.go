package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// The quota lock. Every write a conversation's quota counts (an upload, a run's
// artifacts, a save of one of its Python sessions) is checked and made under the
// conversation's quota lock, a Postgres advisory lock, so two writers on any nodes
// never both pass the quota: the second reads what the first wrote.
//
// The lock is held in a transaction on its own pool (Options.QuotaLocks). A session's
// save holds it while the engine writes to Redis and to its cold tier, which is in
// Postgres too: were the lock held on the pool the cold tier writes on, writers waiting
// for it could take every connection the holder needs. So a holder needs at most one
// connection of the main pool at a time, and nothing that holds one of the main pool
// waits for the lock.

// quotaLockSpace is the first key of the quota locks (the conversation's id, wrapped to
// 32 bits, is the second): advisory locks of two keys never meet those of one, such as
// the migrations'.
const quotaLockSpace int32 = 0x71756f74

// quotaLockIdle bounds how long a transaction holding a quota lock may sit idle (while
// its holder writes elsewhere): a node that stops mid-write does not stall the
// conversation's writes for longer. Writes take a second or two at most.
const quotaLockIdle = "30s"

// Options adjust a Store.
type Options struct {
	// QuotaLocks is the pool the quota locks are held on; nil: the store's own, which is
	// enough for a process with few writers at once (tools, tests).
	QuotaLocks *pgxpool.Pool
}

// lockQuota takes convID's quota lock in tx, held until tx ends, and reads what the
// conversation's files take then: as a statement of its own, it sees what the
// lock's previous holder committed.
func lockQuota(ctx context.Context, tx pgx.Tx, convID int64) (conversations.FileUsage, error) {
	if _, err := tx.Exec(ctx, `select set_config('idle_in_transaction_session_timeout', $3, true), pg_advisory_xact_lock($1, $2)`,
		quotaLockSpace, int32(convID), quotaLockIdle); err != nil {
		return conversations.FileUsage{}, pgdb.PgError(err, "conversation")
	}
	return fileUsage(ctx, tx, convID)
}

// withQuota runs fn in a transaction that holds convID's quota lock, with what the
// conversation's files take.
func (s *Store) withQuota(ctx context.Context, convID int64, fn func(tx pgx.Tx, files conversations.FileUsage) error) error {
	tx, err := s.locks.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	files, err := lockQuota(ctx, tx, convID)
	if err != nil {
		return err
	}
	if err := fn(tx, files); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// LockQuota takes convID's quota lock for a write the store does not make (a save of one
// of the conversation's Python sessions) and returns what the conversation's files take
// now; unlock, once the write is made or refused, lets the next writer in. No permission
// check: runs call it for a conversation they were authorized on.
func (s *Store) LockQuota(ctx context.Context, convID int64) (files conversations.FileUsage, unlock func(), err error) {
	tx, err := s.locks.Begin(ctx)
	if err != nil {
		return files, nil, err
	}
	unlock = func() {
		// Nothing was written: ending the transaction lets the lock go (and a connection
		// that cannot end it is closed, which does too).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	if files, err = lockQuota(ctx, tx, convID); err != nil {
		unlock()
		return files, nil, err
	}
	return files, unlock, nil
}

// FileUsage is what a conversation's files take and the sessions its runs used, in one
// statement, without the lock; no permission check (runs call it for a conversation
// they were authorized on; the storage endpoint authorizes first).
func (s *Store) FileUsage(ctx context.Context, convID int64) (conversations.FileUsage, error) {
	return fileUsage(ctx, s.db, convID)
}

func fileUsage(ctx context.Context, q pgdb.Querier, convID int64) (conversations.FileUsage, error) {
	var u conversations.FileUsage
	err := q.QueryRow(ctx, `select coalesce(sum(size) filter (where source = 'upload'), 0), coalesce(sum(size) filter (where source = 'artifact'), 0),
			(select coalesce(array_agg(distinct session_key), '{}') from executions where conversation_id = $1)
		from files where conversation_id = $1`, convID).Scan(&u.Uploads, &u.Artifacts, &u.SessionKeys)
	return u, pgdb.PgError(err, "files")
}
