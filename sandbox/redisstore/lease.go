package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases: one run at a time per session, across nodes. A lease expires ttl after its last
// renewal (the engine's LeaseTTL), so a node that died gives its sessions up in seconds.

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// Acquire waits for the session's lease. Local waiters are already serialised by the
// engine, so this polls only for runs on other nodes.
func (s *Store) Acquire(ctx context.Context, session, token string, ttl time.Duration) error {
	k := s.key(session, "lease")
	wait := 5 * time.Millisecond
	for {
		ok, err := s.rdb.SetNX(ctx, k, token, ttl).Result()
		if err != nil {
			return fail(ctx, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 100*time.Millisecond)
	}
}

// Renew extends a lease still held by token.
func (s *Store) Renew(ctx context.Context, session, token string, ttl time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.key(session, "lease")}, token, ttl.Milliseconds()).Int64()
	return n == 1, fail(ctx, err)
}

// Release gives up a lease still held by token.
func (s *Store) Release(ctx context.Context, session, token string) error {
	return fail(ctx, releaseScript.Run(ctx, s.rdb, []string{s.key(session, "lease")}, token).Err())
}

// admitScript bounds the runs waiting for one session across nodes; entries of a node
// that died are dropped once older than the longest possible run.
var admitScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[4]))
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[3]) then return 0 end -- the running one plus ARGV[3] waiting
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1`)

// Admit queues token for the session's lease unless depth runs already wait; stale is
// the longest a run can take.
func (s *Store) Admit(ctx context.Context, session, token string, depth int, stale time.Duration) (bool, error) {
	n, err := admitScript.Run(ctx, s.rdb, []string{s.key(session, "queue")}, time.Now().UnixMilli(), token, depth, stale.Milliseconds()).Int64()
	return n == 1, fail(ctx, err)
}

// Leave takes token out of the session's queue.
func (s *Store) Leave(ctx context.Context, session, token string) error {
	return fail(ctx, s.rdb.ZRem(ctx, s.key(session, "queue"), token).Err())
}
