// Package redisstore keeps the sandbox's session state, leases and the shared base
// snapshot in Redis. Every key of one session shares a hash tag so the scripts stay
// single-slot on Redis Cluster. Driver errors are translated here: a Redis that cannot
// be reached is sandchat's "unavailable" naming Redis, with Retry-After.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Store is the sandbox engine's state in one Redis (or Redis Cluster), the hot copy;
// with a cold tier, a session's heap and larger files live there and Redis keeps what
// a session holds bounded.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	zenc   *zstd.Encoder
	zdec   *zstd.Decoder
	cold   state.Cold
	hot    int64
}

// Options add a cold tier.
type Options struct {
	// Cold keeps the heaps and files that do not stay in Redis; nil keeps all in Redis.
	Cold state.Cold
	// HotBytes bounds what one session keeps in Redis (with Cold set): a heap, files and
	// replay log past it are refused, after the heap and every changed file went cold.
	HotBytes int64
}

// Items at least this large go to the cold tier: a heap (compressed) and a file.
const (
	coldHeapBytes = 256 << 10
	coldFileBytes = 64 << 10
)

// New keeps state under prefix+"sandbox:"; a session's state expires ttl after its last run.
func New(rdb redis.UniversalClient, prefix string, ttl time.Duration, opt ...Options) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("redisstore: a Redis client is required")
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(8<<30))
	if err != nil {
		return nil, err
	}
	st := &Store{rdb: rdb, prefix: prefix + "sandbox:", ttl: ttl, zenc: enc, zdec: dec}
	for _, o := range opt {
		st.cold, st.hot = o.Cold, o.HotBytes
	}
	if st.cold != nil && st.hot < 1<<20 {
		return nil, errors.New("redisstore: the hot bound must be at least 1 MiB")
	}
	return st, nil
}

// coldName is a session's name in the cold tier: the prefix keeps deployments that
// share a database apart.
func (s *Store) coldName(session string) string { return s.prefix + session }

func (s *Store) key(session, part string) string { return s.prefix + "{" + session + "}:" + part }

// fail translates a driver error at the boundary: the caller's own end stays its own,
// an unreachable Redis is a 503 naming Redis.
func fail(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sandchat.RedisError(fmt.Errorf("sandbox state store: %w", err))
}

// Version is the session's stored version; 0 when it has none.
func (s *Store) Version(ctx context.Context, session string) (int64, error) {
	v, err := s.rdb.HGet(ctx, s.key(session, "state"), "version").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, fail(ctx, err)
}

// resetScript forgets a session's state, and leaves the version it had reached as the
// floor of the next one's (save.go): versions never repeat across a reset, so a warm
// copy from before it, on any node, can neither be taken for the session nor save.
// ARGV[2] "1" leaves the session marked seen, as the save does.
var resetScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local floor = tonumber(redis.call('GET', KEYS[6]) or '0')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if v > floor then floor = v end
if floor > 0 then
  if tonumber(ARGV[1]) > 0 then redis.call('SET', KEYS[6], floor, 'PX', ARGV[1]) else redis.call('SET', KEYS[6], floor) end
end
if ARGV[2] == '1' then
  if tonumber(ARGV[1]) > 0 then redis.call('SET', KEYS[5], '1', 'PX', ARGV[1]) else redis.call('SET', KEYS[5], '1') end
end
return floor
`)

// Seen tells an expired session from one that never existed: the marker outlives the state.
func (s *Store) Seen(ctx context.Context, session string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.key(session, "seen")).Result()
	return n > 0, fail(ctx, err)
}

// Load returns the session's state, nil when it has none; withCells adds the whole
// replay log.
func (s *Store) Load(ctx context.Context, session string, withCells bool) (*state.State, error) {
	pipe := s.rdb.Pipeline()
	hs := pipe.HGetAll(ctx, s.key(session, "state"))
	fs := pipe.HGetAll(ctx, s.key(session, "files"))
	cs := pipe.HGetAll(ctx, s.key(session, "cold"))
	var cells *redis.StringSliceCmd
	if withCells {
		cells = pipe.LRange(ctx, s.key(session, "cells"), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fail(ctx, err)
	}
	h := hs.Val()
	if len(h) == 0 {
		return nil, nil
	}
	st := &state.State{Base: h["base"], Build: h["build"], Mode: h["mode"], Header: []byte(h["header"]), Files: map[string][]byte{}}
	st.Version, _ = strconv.ParseInt(h["version"], 10, 64)
	st.HeapVersion = st.Version
	if hv, err := strconv.ParseInt(h["heapv"], 10, 64); err == nil {
		st.HeapVersion = hv
	}
	if ms, err := strconv.ParseInt(h["updated"], 10, 64); err == nil {
		st.Updated = time.UnixMilli(ms)
	}
	_ = json.Unmarshal([]byte(h["packages"]), &st.Packages)
	if p := h["pip"]; p != "" {
		st.Pip = json.RawMessage(p)
	}
	d := []byte(h["delta"])
	if ref := h["deltaref"]; ref != "" {
		var err error
		if d, err = s.coldGet(ctx, session, ref); err != nil {
			return nil, err
		}
	}
	if len(d) > 0 {
		// Compressed as it was saved: the engine decompresses it as it sends it.
		st.Delta = d
	}
	for k, v := range fs.Val() {
		st.Files[k] = []byte(v)
	}
	for k, ref := range cs.Val() {
		hash, _, _ := strings.Cut(ref, " ")
		b, err := s.coldGet(ctx, session, hash)
		if err != nil {
			return nil, err
		}
		st.Files[k] = b
	}
	if cells != nil {
		st.Cells = cells.Val()
	}
	if hc, err := strconv.ParseInt(h["hcells"], 10, 64); err == nil && st.HeapVersion < st.Version {
		if st.Tail, err = s.rdb.LRange(ctx, s.key(session, "cells"), hc, -1).Result(); err != nil {
			return nil, fail(ctx, err)
		}
	}
	return st, nil
}

// Cells is the session's whole replay log.
func (s *Store) Cells(ctx context.Context, session string) ([]string, error) {
	cells, err := s.rdb.LRange(ctx, s.key(session, "cells"), 0, -1).Result()
	return cells, fail(ctx, err)
}

// Bytes is what the sessions' states hold as stored, in both tiers: their heaps
// (compressed), files, replay logs and package lists, the total a cap applies to; one
// pipeline for all.
func (s *Store) Bytes(ctx context.Context, sessions ...string) (int64, error) {
	if len(sessions) == 0 {
		return 0, nil
	}
	pipe := s.rdb.Pipeline()
	lens := make([]*redis.IntCmd, 0, 4*len(sessions))
	counts := make([]*redis.SliceCmd, 0, len(sessions))
	for _, session := range sessions {
		k := s.key(session, "state")
		lens = append(lens, pipe.HStrLen(ctx, k, "delta"), pipe.HStrLen(ctx, k, "header"), pipe.HStrLen(ctx, k, "packages"), pipe.HStrLen(ctx, k, "pip"))
		counts = append(counts, pipe.HMGet(ctx, k, "fbytes", "cbytes", "cfbytes", "deltasize"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fail(ctx, err)
	}
	var n int64
	for _, l := range lens {
		n += l.Val()
	}
	for _, c := range counts {
		for _, v := range c.Val() {
			if field, ok := v.(string); ok {
				x, _ := strconv.ParseInt(field, 10, 64)
				n += x
			}
		}
	}
	return n, nil
}

// forgetScript deletes every key of a session and leaves only a marker that it was
// deleted, holding nothing of it, for as long as a run that began before the delete
// could still try to save: the save script refuses to write under it.
var forgetScript = redis.NewScript(`
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('SET', KEYS[9], '1', 'PX', ARGV[1])
return 1
`)

// goneFor is how long a deleted session refuses saves: longer than the longest run
// (300 s) and its wait for the session's lease.
const goneFor = time.Hour

// Forget deletes the session for good (its conversation was deleted): its state, files,
// replay log, seen marker, version floor, lease and queue in Redis, and its blobs in the
// cold tier. A run that began before it cannot save it back.
func (s *Store) Forget(ctx context.Context, session string) error {
	keys := []string{s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "cold"),
		s.key(session, "seen"), s.key(session, "floor"), s.key(session, "lease"), s.key(session, "queue"), s.key(session, "gone")}
	if err := forgetScript.Run(ctx, s.rdb, keys, goneFor.Milliseconds()).Err(); err != nil {
		return fail(ctx, err)
	}
	if s.cold != nil {
		return s.cold.Keep(ctx, s.coldName(session), nil)
	}
	return nil
}

// Reset forgets the session's state, files and log, in both tiers. seen keeps the mark
// of a session that had a state (its next run starts over and says so), as the engine's
// reset of a state that cannot run does; a user's reset starts as a new session.
func (s *Store) Reset(ctx context.Context, session string, seen bool) error {
	keys := []string{s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "cold"), s.key(session, "seen"), s.key(session, "floor")}
	mark := "0"
	if seen {
		mark = "1"
	}
	if err := resetScript.Run(ctx, s.rdb, keys, (s.ttl * 7).Milliseconds(), mark).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fail(ctx, err)
	}
	if s.cold != nil {
		return s.cold.Keep(ctx, s.coldName(session), nil)
	}
	return nil
}
