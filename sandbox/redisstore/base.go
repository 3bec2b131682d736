package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// The base snapshot, content-addressed and shared by every node.

// BaseFor names the base published for a runtime build; "" when none is.
func (s *Store) BaseFor(ctx context.Context, build string) (string, error) {
	h, err := s.rdb.Get(ctx, s.prefix+"build:"+build).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return h, fail(ctx, err)
}

// LoadBase returns the base snapshot of that hash; nil when there is none.
func (s *Store) LoadBase(ctx context.Context, hash string) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.prefix+"base:"+hash).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	} else if err != nil {
		return nil, fail(ctx, err)
	}
	return s.zdec.DecodeAll(b, nil)
}

// PublishBase stores a base and makes it the build's base unless another node got there
// first; it returns the hash every node should use.
func (s *Store) PublishBase(ctx context.Context, build, hash string, snap []byte) (string, error) {
	z := s.zenc.EncodeAll(snap, nil)
	// Bases are never expired: a session saved against one needs it for as long as it lives.
	if err := s.rdb.Set(ctx, s.prefix+"base:"+hash, z, 0).Err(); err != nil {
		return "", fail(ctx, err)
	}
	ok, err := s.rdb.SetNX(ctx, s.prefix+"build:"+build, hash, 0).Result()
	if err != nil {
		return "", fail(ctx, err)
	}
	if ok {
		return hash, nil
	}
	return s.BaseFor(ctx, build)
}

// Purge deletes every key of this store's prefix (bases included): for a store made
// for one measurement or test, never for the server's own.
func (s *Store) Purge(ctx context.Context) error {
	iter := s.rdb.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fail(ctx, err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := s.rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			return fail(ctx, err)
		}
		keys = keys[n:]
	}
	return nil
}
