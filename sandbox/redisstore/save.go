package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Saves and checkpoints: what a run and a heap write, fenced by the lease and bounded
// by the session's cap, with heaps and larger files spilled to the cold tier.

// saveScript writes a run's state only while the caller still holds the lease and the
// stored version is the one its run started from: a stale node can never overwrite a
// newer state (fencing). It keeps the session's total (heap, files, replay log, hot and
// cold) under the cap and what stays in Redis under the hot bound, refusing the whole
// save rather than keeping part of it; asked first with nothing written (dry), it says
// whether the save fits, so a cold blob is written only for a save that fits. Files are either in the files hash (hot) or named
// in the cold hash as "hash size". A save asked again with the same token after it went
// through (its answer lost to a timeout) is answered again: saves are idempotent.
var saveScript = redis.NewScript(`
local state, files, cells, lease, seen, cold = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', KEYS[8]) == 1 then return {-5, 0, 0} end -- the session was deleted (Forget)
if redis.call('GET', lease) ~= ARGV[1] then return {-1, 0, 0} end
local v = tonumber(redis.call('HGET', state, 'version') or '0')
-- A first save after a reset goes past every version the session had before it (the
-- floor Reset left), so a warm copy from before the reset, on any node, never matches.
local nv = tonumber(ARGV[3])
if ARGV[10 + 2 * tonumber(ARGV[9])] == '1' then
  local floor = tonumber(redis.call('GET', KEYS[7]) or '0')
  if floor >= nv then nv = floor + 1 end
end
if v ~= tonumber(ARGV[2]) then
  -- This very save, applied before its answer was lost (asked again after a timeout):
  -- the token that wrote it says so, and it is answered again, not refused.
  if v == nv and redis.call('HGET', state, 'savedby') == ARGV[1] then
    local t = 0
    for _, f in ipairs({'header', 'delta', 'packages', 'pip'}) do t = t + redis.call('HSTRLEN', state, f) end
    for _, f in ipairs({'fbytes', 'cbytes', 'cfbytes', 'deltasize'}) do t = t + tonumber(redis.call('HGET', state, f) or '0') end
    return {v, t, 0}
  end
  return {-2, 0, 0}
end
local ttl, cap, hotcap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local fixedhot, fixedcold = tonumber(ARGV[7]), tonumber(ARGV[8])
local hadcold = redis.call('HLEN', cold) > 0 or (redis.call('HGET', state, 'deltaref') or '') ~= ''
if fixedhot < 0 then fixedhot = redis.call('HSTRLEN', state, 'header') + redis.call('HSTRLEN', state, 'delta') end
if fixedcold < 0 then fixedcold = tonumber(redis.call('HGET', state, 'deltasize') or '0') end
local i = 9
local fields = i
local nf = tonumber(ARGV[i]); i = i + 1 + 2 * nf
-- The package lists are kept, so they count.
local meta = 0
for k = 0, nf - 1 do
  local f = ARGV[fields + 1 + 2 * k]
  if f == 'packages' or f == 'pip' then meta = meta + #ARGV[fields + 2 + 2 * k] end
end
local clear = ARGV[i] == '1'; i = i + 1
local fbytes, cbytes, cfbytes = 0, 0, 0
if not clear then
  fbytes = tonumber(redis.call('HGET', state, 'fbytes') or '0')
  cbytes = tonumber(redis.call('HGET', state, 'cbytes') or '0')
  cfbytes = tonumber(redis.call('HGET', state, 'cfbytes') or '0')
end
local function forget(name)
  if clear then return end
  fbytes = fbytes - redis.call('HSTRLEN', files, name)
  local ref = redis.call('HGET', cold, name)
  if ref then cfbytes = cfbytes - (tonumber(string.match(ref, ' (%d+)$')) or 0) end
end
local changed = i
local nc = tonumber(ARGV[i]); i = i + 1
for k = 0, nc - 1 do
  forget(ARGV[i + 2 * k])
  fbytes = fbytes + #ARGV[i + 2 * k + 1]
end
i = i + 2 * nc
local colds = i
local ncold = tonumber(ARGV[i]); i = i + 1
for k = 0, ncold - 1 do
  forget(ARGV[i + 3 * k])
  cfbytes = cfbytes + tonumber(ARGV[i + 3 * k + 2])
end
i = i + 3 * ncold
local deleted = i
local nd = tonumber(ARGV[i]); i = i + 1
for k = 0, nd - 1 do forget(ARGV[i + k]) end
i = i + nd
local ncell = tonumber(ARGV[i]); i = i + 1
for k = 0, ncell - 1 do cbytes = cbytes + #ARGV[i + k] end
local hot = fbytes + cbytes + fixedhot + meta
local total = hot + cfbytes + fixedcold
if total > cap then return {-3, total, 0} end
if hot > hotcap then return {-4, hot, 0} end
if ARGV[i + ncell] == '1' then return {0, total, 0} end -- asked whether it fits, before the cold tier is written
if clear then redis.call('DEL', files, cells, cold) end
for k = 0, nf - 1 do redis.call('HSET', state, ARGV[fields + 1 + 2 * k], ARGV[fields + 2 + 2 * k]) end
for k = 0, nc - 1 do
  redis.call('HSET', files, ARGV[changed + 1 + 2 * k], ARGV[changed + 2 + 2 * k])
  redis.call('HDEL', cold, ARGV[changed + 1 + 2 * k])
end
for k = 0, ncold - 1 do
  redis.call('HSET', cold, ARGV[colds + 1 + 3 * k], ARGV[colds + 2 + 3 * k] .. ' ' .. ARGV[colds + 3 + 3 * k])
  redis.call('HDEL', files, ARGV[colds + 1 + 3 * k])
end
for k = 0, nd - 1 do
  redis.call('HDEL', files, ARGV[deleted + 1 + k])
  redis.call('HDEL', cold, ARGV[deleted + 1 + k])
end
for k = 0, ncell - 1 do redis.call('RPUSH', cells, ARGV[i + k]) end
redis.call('HSET', state, 'version', nv, 'savedby', ARGV[1], 'fbytes', fbytes, 'cbytes', cbytes, 'cfbytes', cfbytes)
for _, key in ipairs({state, files, cells, cold}) do redis.call('PEXPIRE', key, ttl) end
redis.call('SET', seen, '1', 'PX', ttl * 7)
local hascold = redis.call('HLEN', cold) > 0 or (redis.call('HGET', state, 'deltaref') or '') ~= ''
if hadcold or hascold then return {nv, total, 1} end
return {nv, total, 0}
`)

// Save writes a run's state; it returns the new version and the bytes the session's
// state now holds. state.ErrFenced when the lease or the version moved on, *state.Full
// when the state would pass r.Cap, or keep more than the hot bound in Redis even with
// the heap and every changed file in the cold tier.
func (s *Store) Save(ctx context.Context, session string, r state.Save) (int64, int64, error) {
	delta := r.Delta
	v, total, err := s.save(ctx, session, r, delta, false)
	if full := (*state.Full)(nil); errors.As(err, &full) && full.Hot {
		// Small items filled the hot bound: everything this save changes goes cold.
		v, total, err = s.save(ctx, session, r, delta, true)
	}
	return v, total, err
}

func (s *Store) save(ctx context.Context, session string, r state.Save, delta []byte, allCold bool) (int64, int64, error) {
	pk, _ := json.Marshal(r.Packages)
	pip := string(r.Pip)
	if pip == "" {
		pip = "[]"
	}
	fields := []any{"base", r.Base, "build", r.Build, "mode", r.Mode, "packages", string(pk), "pip", pip, "updated", time.Now().UnixMilli()}
	fixedHot, fixedCold := len(delta)+len(r.Header), 0
	var blobs coldBlobs
	switch {
	case !r.KeepHeap:
		if ref := blobs.spill(s, delta, coldHeapBytes, allCold); ref != "" {
			fields = append(fields, "header", r.Header, "delta", "", "deltaref", ref, "deltasize", len(delta), "heapv", r.From+1, "hcells", -1)
			fixedHot, fixedCold = len(r.Header), len(delta)
		} else {
			fields = append(fields, "header", r.Header, "delta", delta, "deltaref", "", "deltasize", 0, "heapv", r.From+1, "hcells", -1)
		}
	case r.Fresh || r.DropHeap:
		// No heap saved yet, or none that still holds: the whole log is the tail.
		fields = append(fields, "header", "", "delta", "", "deltaref", "", "deltasize", 0, "heapv", 0, "hcells", 0)
		fixedHot = 0
	default:
		fixedHot, fixedCold = -1, -1 // the heap saved before stays, and counts
	}
	hotCap := r.Cap
	if s.cold != nil {
		hotCap = s.hot
	}
	args := []any{r.Token, r.From, r.From + 1, s.ttl.Milliseconds(), r.Cap, hotCap, fixedHot, fixedCold, len(fields) / 2}
	args = append(args, fields...)
	args = append(args, map[bool]string{true: "1", false: "0"}[r.Fresh])
	var hot, cold []any
	for name, data := range r.Changed {
		if ref := blobs.spill(s, data, coldFileBytes, allCold); ref == "" {
			hot = append(hot, name, data)
		} else {
			cold = append(cold, name, ref, len(data))
		}
	}
	args = append(args, len(hot)/2)
	args = append(args, hot...)
	args = append(args, len(cold)/3)
	args = append(args, cold...)
	args = append(args, len(r.Deleted))
	for _, d := range r.Deleted {
		args = append(args, d)
	}
	args = append(args, len(r.Cells))
	for _, c := range r.Cells {
		args = append(args, c)
	}
	keys := []string{s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "lease"), s.key(session, "seen"), s.key(session, "cold"), s.key(session, "floor"), s.key(session, "gone")}
	run := func(dry bool) ([]int64, error) {
		res, err := saveScript.Run(ctx, s.rdb, keys, append(args, map[bool]string{true: "1", false: "0"}[dry])...).Int64Slice()
		if err != nil {
			return nil, fail(ctx, err)
		}
		if len(res) != 3 {
			return nil, fmt.Errorf("save: unexpected reply %v", res)
		}
		return res, nil
	}
	res := []int64{0, 0, 0}
	var err error
	if len(blobs) > 0 {
		// The cold tier is written only for a save that fits: the cap holds there too,
		// at every moment, not only after the refused save's blobs are swept.
		if res, err = run(true); err != nil {
			return 0, 0, err
		}
		if res[0] == 0 {
			if err := blobs.put(ctx, s, session); err != nil {
				return 0, 0, err
			}
		}
	}
	put := len(blobs) > 0
	if res[0] == 0 {
		if res, err = run(false); err != nil {
			return 0, 0, err
		}
	}
	switch {
	case res[0] == -3:
		return 0, res[1], &state.Full{Total: res[1], Cap: r.Cap}
	case res[0] == -4:
		return 0, res[1], &state.Full{Total: res[1], Cap: hotCap, Hot: true}
	case res[0] == -5:
		// A run that began before its session was deleted: what it may have put in the
		// cold tier goes too, and no run holds the session any more to race with.
		if put {
			_ = s.cold.Keep(context.WithoutCancel(ctx), s.coldName(session), nil)
		}
		return 0, 0, state.ErrFenced
	case res[0] < 0:
		return 0, 0, state.ErrFenced
	}
	if res[2] == 1 || put {
		s.keepCold(ctx, session)
	}
	return res[0], res[1], nil
}

// coldBlobs are what one save puts in the cold tier, named before they are written.
type coldBlobs []struct {
	hash string
	data []byte
}

// spill names data as a blob of the cold tier when there is one and data is at least
// min bytes (or any size, with all), for put to write; "" when data stays hot.
func (b *coldBlobs) spill(s *Store, data []byte, min int, all bool) string {
	if s.cold == nil || len(data) == 0 || (len(data) < min && !all) {
		return ""
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	*b = append(*b, struct {
		hash string
		data []byte
	}{hash, data})
	return hash
}

// put writes the blobs.
func (b coldBlobs) put(ctx context.Context, s *Store, session string) error {
	for _, x := range b {
		if err := s.cold.Put(ctx, s.coldName(session), x.hash, x.data); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) coldGet(ctx context.Context, session, hash string) ([]byte, error) {
	if s.cold == nil {
		return nil, errors.New("the session's saved state is in a cold tier this server has none of")
	}
	return s.cold.Get(ctx, s.coldName(session), hash)
}

// keepCold drops the session's cold blobs its state no longer names. It runs under the
// session's lease, after the save that let them go; one it misses is swept with the
// session's TTL.
func (s *Store) keepCold(ctx context.Context, session string) {
	pipe := s.rdb.Pipeline()
	cs := pipe.HVals(ctx, s.key(session, "cold"))
	ref := pipe.HGet(ctx, s.key(session, "state"), "deltaref")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	keep := []string{}
	for _, v := range cs.Val() {
		hash, _, _ := strings.Cut(v, " ")
		keep = append(keep, hash)
	}
	if r := ref.Val(); r != "" {
		keep = append(keep, r)
	}
	_ = s.cold.Keep(ctx, s.coldName(session), keep)
}

// checkpointScript saves a session's heap taken between runs, only while the caller
// holds the lease (if it names one) and the session is still at the version the heap
// matches, so a heap never claims a run it does not hold; the cells logged so far are
// then covered by it. Mode replay (a heap that cannot be saved) drops the heap: the
// whole log is the tail.
var checkpointScript = redis.NewScript(`
local state, cells, lease, cold = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', KEYS[5]) == 1 then return {-5, 0, 0} end -- the session was deleted (Forget)
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return {-1, 0, 0} end
if tonumber(redis.call('HGET', state, 'version') or '0') ~= tonumber(ARGV[2]) then return {-2, 0, 0} end
local hadcold = redis.call('HLEN', cold) > 0 or (redis.call('HGET', state, 'deltaref') or '') ~= ''
local fbytes = tonumber(redis.call('HGET', state, 'fbytes') or '0')
local cbytes = tonumber(redis.call('HGET', state, 'cbytes') or '0')
local cfbytes = tonumber(redis.call('HGET', state, 'cfbytes') or '0')
local hot = fbytes + cbytes + #ARGV[3] + #ARGV[4] + redis.call('HSTRLEN', state, 'packages') + redis.call('HSTRLEN', state, 'pip')
local total = hot + cfbytes + tonumber(ARGV[11])
if total > tonumber(ARGV[8]) then return {-3, total, 0} end
if hot > tonumber(ARGV[9]) then return {-4, hot, 0} end
if ARGV[12] == '1' then return {0, total, 0} end -- asked whether it fits, before the cold tier is written
local hcells = redis.call('LLEN', cells)
if ARGV[7] ~= 'snapshot' then hcells = 0 end
redis.call('HSET', state, 'header', ARGV[3], 'delta', ARGV[4], 'base', ARGV[5], 'build', ARGV[6], 'mode', ARGV[7],
  'heapv', ARGV[2], 'hcells', hcells, 'deltaref', ARGV[10], 'deltasize', ARGV[11])
if hadcold or redis.call('HLEN', cold) > 0 or ARGV[10] ~= '' then return {tonumber(ARGV[2]), total, 1} end
return {tonumber(ARGV[2]), total, 0}
`)

// Checkpoint saves a heap of the session; it returns the bytes the state now holds.
// state.ErrFenced when the lease or the version moved on, *state.Full when the heap
// does not fit the cap or the hot bound.
func (s *Store) Checkpoint(ctx context.Context, session string, c state.Checkpoint) (int64, error) {
	delta := c.Delta
	total, err := s.checkpoint(ctx, session, c, delta, false)
	if full := (*state.Full)(nil); errors.As(err, &full) && full.Hot {
		total, err = s.checkpoint(ctx, session, c, delta, true)
	}
	return total, err
}

func (s *Store) checkpoint(ctx context.Context, session string, c state.Checkpoint, delta []byte, allCold bool) (int64, error) {
	var blobs coldBlobs
	ref := blobs.spill(s, delta, coldHeapBytes, allCold)
	hotDelta, coldSize := delta, 0
	if ref != "" {
		hotDelta, coldSize = nil, len(delta)
	}
	hotCap := c.Cap
	if s.cold != nil {
		hotCap = s.hot
	}
	keys := []string{s.key(session, "state"), s.key(session, "cells"), s.key(session, "lease"), s.key(session, "cold"), s.key(session, "gone")}
	run := func(dry bool) ([]int64, error) {
		res, err := checkpointScript.Run(ctx, s.rdb, keys, c.Token, c.Version, c.Header, hotDelta, c.Base, c.Build, c.Mode, c.Cap, hotCap, ref, coldSize,
			map[bool]string{true: "1", false: "0"}[dry]).Int64Slice()
		if err != nil {
			return nil, fail(ctx, err)
		}
		if len(res) != 3 {
			return nil, fmt.Errorf("checkpoint: unexpected reply %v", res)
		}
		return res, nil
	}
	res := []int64{0, 0, 0}
	var err error
	if ref != "" {
		// The heap goes cold only once it is known to fit (see Save).
		if res, err = run(true); err != nil {
			return 0, err
		}
		if res[0] == 0 {
			if err := blobs.put(ctx, s, session); err != nil {
				return 0, err
			}
		}
	}
	if res[0] == 0 {
		if res, err = run(false); err != nil {
			return 0, err
		}
	}
	switch {
	case res[0] == -3:
		return res[1], &state.Full{Total: res[1], Cap: c.Cap}
	case res[0] == -4:
		return res[1], &state.Full{Total: res[1], Cap: hotCap, Hot: true}
	case res[0] == -5:
		if ref != "" {
			_ = s.cold.Keep(context.WithoutCancel(ctx), s.coldName(session), nil)
		}
		return 0, state.ErrFenced
	case res[0] < 0:
		return 0, state.ErrFenced
	}
	if res[2] == 1 {
		s.keepCold(ctx, session)
	}
	return res[1], nil
}
