package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// store keeps session state, leases and the shared base snapshot in Redis. Every key of
// one session shares a hash tag so the scripts below stay single-slot on Redis Cluster.
type store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	zenc   *zstd.Encoder
	zdec   *zstd.Decoder
}

func newStore(rdb redis.UniversalClient, prefix string, ttl time.Duration) (*store, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(8<<30))
	if err != nil {
		return nil, err
	}
	return &store{rdb: rdb, prefix: prefix + "sandbox:", ttl: ttl, zenc: enc, zdec: dec}, nil
}

func (s *store) key(session, part string) string { return s.prefix + "{" + session + "}:" + part }

// state is what survives a Worker, a server restart or a move to another node.
type state struct {
	Version int64
	Base    string // content hash of the base snapshot the delta is against
	Build   string
	Mode    string // modeSnapshot or modeReplay
	Header  []byte // the snapshot's own header (its length varies between snapshots)
	Delta   []byte // zstd of the heap pages that differ from the base, XOR-ed
	// HeapVersion is the version the heap was checkpointed at; Tail holds the cells run
	// since, which a restore replays on top of it (the log is durable, the heap lazy).
	HeapVersion int64
	Tail        []string
	Packages    []string
	Pip         []pkgs.Wheel // installed with micropip: installed again on restore
	Cells       []string
	Files       map[string][]byte
	Updated     time.Time
}

const (
	modeSnapshot = "snapshot"
	modeReplay   = "replay"
)

func (s *store) version(ctx context.Context, session string) (int64, error) {
	v, err := s.rdb.HGet(ctx, s.key(session, "state"), "version").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

// seen tells an expired session from one that never existed: the marker outlives the state.
func (s *store) seen(ctx context.Context, session string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.key(session, "seen")).Result()
	return n > 0, err
}

func (s *store) load(ctx context.Context, session string, withCells bool) (*state, error) {
	pipe := s.rdb.Pipeline()
	hs := pipe.HGetAll(ctx, s.key(session, "state"))
	fs := pipe.HGetAll(ctx, s.key(session, "files"))
	var cells *redis.StringSliceCmd
	if withCells {
		cells = pipe.LRange(ctx, s.key(session, "cells"), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	h := hs.Val()
	if len(h) == 0 {
		return nil, nil
	}
	st := &state{Base: h["base"], Build: h["build"], Mode: h["mode"], Header: []byte(h["header"]), Files: map[string][]byte{}}
	st.Version, _ = strconv.ParseInt(h["version"], 10, 64)
	st.HeapVersion = st.Version
	if hv, err := strconv.ParseInt(h["heapv"], 10, 64); err == nil {
		st.HeapVersion = hv
	}
	if ms, err := strconv.ParseInt(h["updated"], 10, 64); err == nil {
		st.Updated = time.UnixMilli(ms)
	}
	_ = json.Unmarshal([]byte(h["packages"]), &st.Packages)
	_ = json.Unmarshal([]byte(h["pip"]), &st.Pip)
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
			return nil, err
		}
	}
	return st, nil
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

type saveReq struct {
	Token    string
	From     int64 // version the run started from
	Fresh    bool  // the session started over: forget old files and cells
	Base     string
	Build    string
	Mode     string
	Header   []byte
	Delta    []byte // raw; compressed here
	Packages []string
	Pip      []pkgs.Wheel
	Changed  map[string][]byte
	Deleted  []string
	Cells    []string // appended to the replay log
	Cap      int64    // the most the session's state may hold, in bytes
	// KeepHeap leaves the saved heap as it is: the run is durable by the replay log, and
	// a checkpoint saves the heap later, off the run's path.
	KeepHeap bool
	DropHeap bool // the saved heap is stale (the session came back by replay): forget it
}

var errFenced = errors.New("session lease lost or state changed by another run")

// errStateFull is a save refused because the session's state would pass its cap.
type errStateFull struct{ total, cap int64 }

func (e *errStateFull) Error() string {
	return fmt.Sprintf("the session's saved state would be %.1f MiB, over its %.1f MiB limit", float64(e.total)/(1<<20), float64(e.cap)/(1<<20))
}

// save writes a run's state; it returns the new version and the bytes the session's
// state now holds.
func (s *store) save(ctx context.Context, session string, r saveReq) (int64, int64, error) {
	var delta []byte
	if r.Delta != nil {
		delta = s.zenc.EncodeAll(r.Delta, make([]byte, 0, len(r.Delta)/8))
	}
	pk, _ := json.Marshal(r.Packages)
	pip, _ := json.Marshal(nonNilSlice(r.Pip))
	fields := []any{"base", r.Base, "build", r.Build, "mode", r.Mode, "packages", string(pk), "pip", string(pip), "updated", time.Now().UnixMilli()}
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
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("save: unexpected reply %v", res)
	}
	switch {
	case res[0] == -3:
		return 0, res[1], &errStateFull{total: res[1], cap: r.Cap}
	case res[0] < 0:
		return 0, 0, errFenced
	}
	return res[0], res[1], nil
}

// checkpointScript saves a session's heap taken between runs, only while the caller
// holds the lease (if it names one) and the session is still at the version the heap
// matches, so a heap never claims a run it does not hold; the cells
// logged so far are then covered by it. Mode replay (a heap that cannot be saved) drops
// the heap: the whole log is the tail.
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

// checkpoint saves the heap of key at version; errFenced when the lease or the version
// moved on, errStateFull when the heap does not fit the session's cap.
func (s *store) checkpoint(ctx context.Context, session, token string, version int64, base, build, mode string, header, rawDelta []byte, capBytes int64) (int64, error) {
	var delta []byte
	if rawDelta != nil {
		delta = s.zenc.EncodeAll(rawDelta, make([]byte, 0, len(rawDelta)/8))
	}
	keys := []string{s.key(session, "state"), s.key(session, "cells"), s.key(session, "lease")}
	res, err := checkpointScript.Run(ctx, s.rdb, keys, token, version, header, delta, base, build, mode, capBytes).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("checkpoint: unexpected reply %v", res)
	}
	switch {
	case res[0] == -3:
		return res[1], &errStateFull{total: res[1], cap: capBytes}
	case res[0] < 0:
		return 0, errFenced
	}
	return res[1], nil
}

func (s *store) reset(ctx context.Context, session string) error {
	return s.rdb.Del(ctx, s.key(session, "state"), s.key(session, "files"), s.key(session, "cells"), s.key(session, "seen")).Err()
}

// ---- leases: one run at a time per session, across nodes ----

// leaseTTL is how long a node that died keeps a session's lease: a live node renews it
// every third of it, so a dead one's run is taken over in seconds.
const leaseTTL = 4 * time.Second

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// acquire waits for the session's lease. Local waiters are already serialised by the
// engine, so this polls only for runs on other nodes.
func (s *store) acquire(ctx context.Context, session, token string) error {
	k := s.key(session, "lease")
	wait := 5 * time.Millisecond
	for {
		ok, err := s.rdb.SetNX(ctx, k, token, leaseTTL).Result()
		if err != nil {
			return err
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

func (s *store) renew(ctx context.Context, session, token string) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.key(session, "lease")}, token, leaseTTL.Milliseconds()).Int64()
	return n == 1, err
}

func (s *store) release(ctx context.Context, session, token string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.key(session, "lease")}, token).Err()
}

// admitScript bounds the runs waiting for one session across nodes; entries of a node
// that died are dropped once older than the longest possible run.
var admitScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[4]))
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[3]) then return 0 end -- the running one plus ARGV[3] waiting
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1`)

func (s *store) admit(ctx context.Context, session, token string, depth int, stale time.Duration) (bool, error) {
	n, err := admitScript.Run(ctx, s.rdb, []string{s.key(session, "queue")}, time.Now().UnixMilli(), token, depth, stale.Milliseconds()).Int64()
	return n == 1, err
}

func (s *store) leave(ctx context.Context, session, token string) error {
	return s.rdb.ZRem(ctx, s.key(session, "queue"), token).Err()
}

// ---- the base snapshot, content-addressed and shared by every node ----

func (s *store) baseFor(ctx context.Context, build string) (string, error) {
	h, err := s.rdb.Get(ctx, s.prefix+"build:"+build).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return h, err
}

func (s *store) loadBase(ctx context.Context, hash string) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.prefix+"base:"+hash).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return s.zdec.DecodeAll(b, nil)
}

// publishBase stores a base and makes it the build's base unless another node got there
// first; it returns the hash every node should use.
func (s *store) publishBase(ctx context.Context, build, hash string, snap []byte) (string, error) {
	z := s.zenc.EncodeAll(snap, nil)
	// Bases are never expired: a session saved against one needs it for as long as it lives.
	if err := s.rdb.Set(ctx, s.prefix+"base:"+hash, z, 0).Err(); err != nil {
		return "", err
	}
	ok, err := s.rdb.SetNX(ctx, s.prefix+"build:"+build, hash, 0).Result()
	if err != nil {
		return "", err
	}
	if ok {
		return hash, nil
	}
	return s.baseFor(ctx, build)
}
