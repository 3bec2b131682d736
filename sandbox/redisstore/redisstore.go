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
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Store is the sandbox engine's state in one Redis (or Redis Cluster).
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	zenc   *zstd.Encoder
	zdec   *zstd.Decoder
}

// New keeps state under prefix+"sandbox:"; a session's state expires ttl after its last run.
func New(rdb redis.UniversalClient, prefix string, ttl time.Duration) (*Store, error) {
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
	return &Store{rdb: rdb, prefix: prefix + "sandbox:", ttl: ttl, zenc: enc, zdec: dec}, nil
}

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
	if d := h["delta"]; d != "" {
		raw, err := s.zdec.DecodeAll([]byte(d), nil)
		if err != nil {
			return nil, fmt.Errorf("decompress session state: %w", err)
		}
		st.Delta = raw
	}
	for k, v := range fs.Val() {
		st.Files[k] = []byte(v)
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

// Bytes is what the session's state holds as stored: its heap (compressed), files and
// replay log, the total its cap applies to.
func (s *Store) Bytes(ctx context.Context, session string) (int64, error) {
	k := s.key(session, "state")
	pipe := s.rdb.Pipeline()
	d := pipe.HStrLen(ctx, k, "delta")
	h := pipe.HStrLen(ctx, k, "header")
	fc := pipe.HMGet(ctx, k, "fbytes", "cbytes")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fail(ctx, err)
	}
	n := d.Val() + h.Val()
	for _, v := range fc.Val() {
		if s, ok := v.(string); ok {
			x, _ := strconv.ParseInt(s, 10, 64)
			n += x
		}
	}
	return n, nil
}

// saveScript writes a run's state only while the caller still holds the lease and the
// stored version is the one its run started from: a stale node can never overwrite a
// newer state (fencing). It also keeps the session's total (heap delta, files, replay
// log) under the cap, refusing the whole save rather than keeping part of it.
var saveScript = redis.NewScript(`
local state, files, cells, lease, seen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('GET', lease) ~= ARGV[1] then return {-1, 0} end
local v = tonumber(redis.call('HGET', state, 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-2, 0} end
local ttl, cap, fixed = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if fixed < 0 then fixed = redis.call('HSTRLEN', state, 'header') + redis.call('HSTRLEN', state, 'delta') end
local i = 7
local fields = i
local nf = tonumber(ARGV[i]); i = i + 1 + 2 * nf
local clear = ARGV[i] == '1'; i = i + 1
local fbytes, cbytes = 0, 0
if not clear then
  fbytes = tonumber(redis.call('HGET', state, 'fbytes') or '0')
  cbytes = tonumber(redis.call('HGET', state, 'cbytes') or '0')
end
local changed = i
local nc = tonumber(ARGV[i]); i = i + 1
for k = 0, nc - 1 do
  local name, data = ARGV[i + 2 * k], ARGV[i + 2 * k + 1]
  if not clear then fbytes = fbytes - redis.call('HSTRLEN', files, name) end
  fbytes = fbytes + #data
end
i = i + 2 * nc
local deleted = i
local nd = tonumber(ARGV[i]); i = i + 1
for k = 0, nd - 1 do
  if not clear then fbytes = fbytes - redis.call('HSTRLEN', files, ARGV[i + k]) end
end
i = i + nd
local ncell = tonumber(ARGV[i]); i = i + 1
for k = 0, ncell - 1 do cbytes = cbytes + #ARGV[i + k] end
local total = fbytes + cbytes + fixed
if total > cap then return {-3, total} end
if clear then redis.call('DEL', files, cells) end
for k = 0, nf - 1 do redis.call('HSET', state, ARGV[fields + 1 + 2 * k], ARGV[fields + 2 + 2 * k]) end
for k = 0, nc - 1 do redis.call('HSET', files, ARGV[changed + 1 + 2 * k], ARGV[changed + 2 + 2 * k]) end
for k = 0, nd - 1 do redis.call('HDEL', files, ARGV[deleted + 1 + k]) end
for k = 0, ncell - 1 do redis.call('RPUSH', cells, ARGV[i + k]) end
redis.call('HSET', state, 'version', ARGV[3], 'fbytes', fbytes, 'cbytes', cbytes)
redis.call('PEXPIRE', state, ttl)
redis.call('PEXPIRE', files, ttl)
redis.call('PEXPIRE', cells, ttl)
redis.call('SET', seen, '1', 'PX', ttl * 7)
return {tonumber(ARGV[3]), total}
`)

// Save writes a run's state; it returns the new version and the bytes the session's
// state now holds. state.ErrFenced when the lease or the version moved on, *state.Full
// when the state would pass r.Cap.
func (s *Store) Save(ctx context.Context, session string, r state.Save) (int64, int64, error) {
	var delta []byte
	if r.Delta != nil {
		delta = s.zenc.EncodeAll(r.Delta, make([]byte, 0, len(r.Delta)/8))
	}
	pk, _ := json.Marshal(r.Packages)
	pip := string(r.Pip)
	if pip == "" {
		pip = "[]"
	}
	fields := []any{"base", r.Base, "build", r.Build, "mode", r.Mode, "packages", string(pk), "pip", pip, "updated", time.Now().UnixMilli()}
	fixed := len(delta) + len(r.Header)
	switch {
	case !r.KeepHeap:
		fields = append(fields, "header", r.Header, "delta", delta, "heapv", r.From+1, "hcells", -1)
	case r.Fresh || r.DropHeap:
		// No heap saved yet, or none that still holds: the whole log is the tail.
		fields = append(fields, "header", "", "delta", "", "heapv", 0, "hcells", 0)
	default:
		fixed = -1 // the heap saved before stays, and counts
	}
	args := []any{r.Token, r.From, r.From + 1, s.ttl.Milliseconds(), r.Cap, fixed, len(fields) / 2}
	args = append(args, fields...)
	args = append(args, map[bool]string{true: "1", false: "0"}[r.Fresh], len(r.Changed))
	for k, v := range r.Changed {
		args = append(args, k, v)
	}
	args = append(args, len(r.Deleted))
	for _, d := range r.Deleted {
		args = append(args, d)
	}
	args = append(args, len(r.Cells))
	for _, c := range r.Cells {
		args = append(args, c)
	}
	keys := []string{s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "lease"), s.key(session, "seen")}
	res, err := saveScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, fail(ctx, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("save: unexpected reply %v", res)
	}
	switch {
	case res[0] == -3:
		return 0, res[1], &state.Full{Total: res[1], Cap: r.Cap}
	case res[0] < 0:
		return 0, 0, state.ErrFenced
	}
	return res[0], res[1], nil
}

// checkpointScript saves a session's heap taken between runs, only while the caller
// holds the lease (if it names one) and the session is still at the version the heap
// matches, so a heap never claims a run it does not hold; the cells logged so far are
// then covered by it. Mode replay (a heap that cannot be saved) drops the heap: the
// whole log is the tail.
var checkpointScript = redis.NewScript(`
local state, cells, lease = KEYS[1], KEYS[2], KEYS[3]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return {-1, 0} end
if tonumber(redis.call('HGET', state, 'version') or '0') ~= tonumber(ARGV[2]) then return {-2, 0} end
local fbytes = tonumber(redis.call('HGET', state, 'fbytes') or '0')
local cbytes = tonumber(redis.call('HGET', state, 'cbytes') or '0')
local total = fbytes + cbytes + #ARGV[3] + #ARGV[4]
if total > tonumber(ARGV[8]) then return {-3, total} end
local hcells = redis.call('LLEN', cells)
if ARGV[7] ~= 'snapshot' then hcells = 0 end
redis.call('HSET', state, 'header', ARGV[3], 'delta', ARGV[4], 'base', ARGV[5], 'build', ARGV[6], 'mode', ARGV[7],
  'heapv', ARGV[2], 'hcells', hcells)
return {tonumber(ARGV[2]), total}
`)

// Checkpoint saves a heap of the session; it returns the bytes the state now holds.
// state.ErrFenced when the lease or the version moved on, *state.Full when the heap
// does not fit the cap.
func (s *Store) Checkpoint(ctx context.Context, session string, c state.Checkpoint) (int64, error) {
	var delta []byte
	if c.Delta != nil {
		delta = s.zenc.EncodeAll(c.Delta, make([]byte, 0, len(c.Delta)/8))
	}
	keys := []string{s.key(session, "state"), s.key(session, "cells"), s.key(session, "lease")}
	res, err := checkpointScript.Run(ctx, s.rdb, keys, c.Token, c.Version, c.Header, delta, c.Base, c.Build, c.Mode, c.Cap).Int64Slice()
	if err != nil {
		return 0, fail(ctx, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("checkpoint: unexpected reply %v", res)
	}
	switch {
	case res[0] == -3:
		return res[1], &state.Full{Total: res[1], Cap: c.Cap}
	case res[0] < 0:
		return 0, state.ErrFenced
	}
	return res[1], nil
}

// Reset forgets the session's state, files and log.
func (s *Store) Reset(ctx context.Context, session string) error {
	return fail(ctx, s.rdb.Del(ctx, s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "seen")).Err())
}
