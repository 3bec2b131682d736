package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// evictLive evicts the warm interpreter of key as MaxLive or the idle timeout would: its
// heap is checkpointed, then its process stops.
func evictLive(t testing.TB, e *Engine, key string) {
	t.Helper()
	if !e.sess.evict(key, "evicted by the test") {
		t.Fatalf("session %s is not live and idle", key)
	}
}

// evictSaved is evictLive once the heap is saved as the delayed checkpoint saves it, with
// no deadline: for tests of what a restore brings back. Under -race on a busy machine a
// heap with packages loaded can take longer to save than eviction's own bound
// (retireTimeout), and the session comes back by replay instead: right, but not what
// those tests look at. TestCheckpoint's "eviction saves the heap first" tests that save.
func evictSaved(t testing.TB, e *Engine, key string) {
	t.Helper()
	checkpointNow(t, e, key)
	evictLive(t, e, key)
}

// checkpointNow saves key's heap as its delayed checkpoint would, and returns what the
// session's durable state says then.
func checkpointNow(t testing.TB, e *Engine, key string) SessionInfo {
	t.Helper()
	if err := e.sess.checkpoint(context.Background(), key); err != nil && !errors.Is(err, session.ErrHeapTooLarge) {
		t.Fatalf("checkpoint: %v", err)
	}
	info, err := e.Session(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestStatePersistence(t *testing.T) {
	t.Parallel()
	e, b, key := setup(t)
	ctx := context.Background()

	// A node that never checkpoints (its delay outlasts the test): a node that died
	// before its checkpoint leaves the session to its log.
	lazy := func(t *testing.T) *Engine {
		cfg := testConfig(b.prefix)
		cfg.CheckpointDelay = time.Hour
		return startEngine(t, cfg, b.rdb)
	}
	// Each case builds state on its first node, loses the warm interpreter in its own
	// way, then checks what the next run sees.
	tests := []struct {
		name  string
		first func(t *testing.T) *Engine           // the node the state is built on
		lose  func(t *testing.T, k string) *Engine // returns the engine to continue on
		from  string
	}{
		{name: "warm interpreter", lose: func(*testing.T, string) *Engine { return e }, from: FromLive},
		{name: "worker evicted", lose: func(t *testing.T, k string) *Engine { evictLive(t, e, k); return e }, from: FromSnapshot},
		{name: "another node", first: lazy, lose: func(t *testing.T, k string) *Engine {
			// A second engine on the same Redis prefix is another node of the same
			// deployment; the first has not checkpointed, so the log replays.
			return startEngine(t, testConfig(b.prefix), b.rdb)
		}, from: FromReplay},
	}
	for _, tt := range tests {
		want := tt.from
		t.Run(tt.name, func(t *testing.T) {
			k := key(tt.name)
			e := e
			if tt.first != nil {
				e = tt.first(t)
			}
			mustSucceed(t, e, k, "import json, collections\nx = 1\ndef gen():\n    i = 0\n    while True:\n        i += 1\n        yield i\ng = gen()\nnext(g)\nclass C:\n    def hello(self): return 'hi'\nopen('notes.txt', 'w').write('kept')")
			mustSucceed(t, e, k, "x += 1\nnext(g)")
			e2 := tt.lose(t, k)
			r := mustSucceed(t, e2, k, "[x, next(g), C().hello(), open('notes.txt').read(), json.dumps({'a': 1})]")
			if got := resultOf(r); got != `[2, 3, 'hi', 'kept', '{"a": 1}']` {
				t.Errorf("state after %s: %s", tt.name, got)
			}
			if r.Session.RestoredFrom != want || r.Session.Version != 3 {
				t.Errorf("restored from %s version %d, want %s version 3", r.Session.RestoredFrom, r.Session.Version, want)
			}
			if e2 != e {
				// Back on the first node, its warm copy is stale and must not be used.
				r := mustSucceed(t, e, k, "x")
				if resultOf(r) != "2" || r.Session.RestoredFrom == FromLive || r.Session.Version != 4 {
					t.Errorf("first node after another ran: %s from %s v%d", resultOf(r), r.Session.RestoredFrom, r.Session.Version)
				}
			}
		})
	}

	t.Run("server restart restores from Redis", func(t *testing.T) {
		k := key("restart")
		e1 := startEngine(t, testConfig(b.prefix), b.rdb)
		mustSucceed(t, e1, k, "big = list(range(1000))\ntotal = sum(big)")
		if err := e1.Close(); err != nil {
			t.Fatal(err)
		}
		e2 := startEngine(t, testConfig(b.prefix), b.rdb)
		r := mustSucceed(t, e2, k, "total")
		if resultOf(r) != "499500" || r.Session.RestoredFrom != FromSnapshot {
			t.Fatalf("got %s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})

	t.Run("a failed run does not overwrite saved state", func(t *testing.T) {
		k := key("failed")
		mustSucceed(t, e, k, "x = 'good'")
		r := run(t, e, k, "x = 'bad'\nraise ValueError('boom')")
		if r.Status != StatusError || r.Session.Version != 1 {
			t.Fatalf("status %s version %d", r.Status, r.Session.Version)
		}
		// The interpreter holds the failed run's effects, so its heap is never saved:
		// the session comes back from its log.
		evictLive(t, e, k)
		r = mustSucceed(t, e, k, "x")
		if resultOf(r) != "'good'" || r.Session.RestoredFrom != FromReplay {
			t.Fatalf("x = %s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})

	t.Run("files changed by an unsaved run are saved by the next good one", func(t *testing.T) {
		k := key("files")
		run(t, e, k, "open('a.txt', 'w').write('1')\nraise ValueError")
		mustSucceed(t, e, k, "open('b.txt', 'w').write('2')")
		evictLive(t, e, k)
		r := mustSucceed(t, e, k, "sorted(__import__('os').listdir('.'))")
		if resultOf(r) != "['a.txt', 'b.txt']" {
			t.Fatalf("files %s", resultOf(r))
		}
		info, err := e.Session(ctx, k)
		if err != nil || len(info.Files) != 2 || info.Version != 2 {
			t.Fatalf("session %+v err %v", info, err)
		}
	})

	t.Run("a heap grown past the base restores", func(t *testing.T) {
		k := key("grown")
		r := mustSucceed(t, e, k, "big = list(range(100000))\nblob = bytearray(64 << 20)\nblob[-1] = 7")
		t.Logf("state of a session with a 100k list and a 64 MiB bytearray: %d bytes", r.Session.StateBytes)
		evictLive(t, e, k)
		r = mustSucceed(t, e, k, "[sum(big), len(blob), blob[-1]]")
		if resultOf(r) != "[4999950000, 67108864, 7]" || r.Session.RestoredFrom != FromSnapshot {
			t.Fatalf("got %s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})

	t.Run("files too big for Redis stay in the warm session only", func(t *testing.T) {
		k := key("bigfile")
		r := mustSucceed(t, e, k, "open('big.bin', 'wb').write(b'x' * (11 << 20))\nopen('small.txt', 'w').write('ok')")
		if len(r.Artifacts) != 1 || r.Artifacts[0].Name != "small.txt" || !strings.Contains(r.Stderr, "big.bin") {
			t.Fatalf("artifacts %v stderr %q", r.Artifacts, r.Stderr)
		}
		evictLive(t, e, k)
		r = mustSucceed(t, e, k, "sorted(__import__('os').listdir('.'))")
		if resultOf(r) != "['small.txt']" {
			t.Fatalf("files after restore %s", resultOf(r))
		}
	})

	t.Run("expired session starts fresh and says so", func(t *testing.T) {
		k := key("expired")
		mustSucceed(t, e, k, "x = 1")
		evictLive(t, e, k)
		// What TTL expiry leaves behind: no state, only the marker that it existed.
		b.rdb.Del(ctx, skey(e, k, "state"), skey(e, k, "files"), skey(e, k, "cells"))
		r := run(t, e, k, "x")
		if r.Status != StatusError || r.Error.Type != "NameError" || !r.Session.Expired || r.Session.RestoredFrom != FromFresh {
			t.Fatalf("status %s expired %v from %s", r.Status, r.Session.Expired, r.Session.RestoredFrom)
		}
	})

	t.Run("state has a TTL", func(t *testing.T) {
		k := key("ttl")
		mustSucceed(t, e, k, "x = 1")
		ttl := b.rdb.PTTL(ctx, skey(e, k, "state")).Val()
		if ttl <= 0 || ttl > e.cfg.SessionTTL {
			t.Fatalf("ttl %s, want up to %s", ttl, e.cfg.SessionTTL)
		}
	})

	t.Run("reset forgets the session", func(t *testing.T) {
		k := key("reset")
		mustSucceed(t, e, k, "x = 1")
		if err := e.Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Session(ctx, k); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
			t.Fatalf("session after reset: %v", err)
		}
		r := run(t, e, k, "x")
		if r.Status != StatusError || r.Session.RestoredFrom != FromFresh || r.Session.Expired {
			t.Fatalf("after reset: %s from %s expired %v", r.Status, r.Session.RestoredFrom, r.Session.Expired)
		}
	})

	t.Run("small session state stays small", func(t *testing.T) {
		k := key("small")
		mustSucceed(t, e, k, "x = 1\ndef f(a): return a + x")
		if info := checkpointNow(t, e, k); info.StateBytes <= 0 || info.StateBytes > 200<<10 || info.Mode != modeSnapshot {
			t.Fatalf("state of %d bytes, mode %s", info.StateBytes, info.Mode)
		}
	})

	t.Run("session info", func(t *testing.T) {
		k := key("info")
		mustSucceed(t, e, k, "open('out.txt', 'w').write('x')")
		info, err := e.Session(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if info.Version != 1 || info.Mode != modeSnapshot || !info.Live || len(info.Files) != 1 || info.UpdatedAt.IsZero() {
			t.Fatalf("%+v", info)
		}
	})
}

func TestReplayPersistence(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay = true })
	k := "replay"
	mustSucceed(t, e, k, "import random\nrandom.seed(7)\nfirst = random.random()\nitems = []")
	mustSucceed(t, e, k, "items.append(len(items))\nitems.append(len(items))")
	r := run(t, e, k, "items.append('from a failed run')\nraise RuntimeError")
	if r.Status != StatusError {
		t.Fatal(r.Status)
	}
	evictLive(t, e, k)
	r = mustSucceed(t, e, k, "[items, first == __import__('random').Random(7).random()]")
	if resultOf(r) != "[[0, 1], True]" || r.Session.RestoredFrom != FromReplay || r.Session.Mode != modeReplay {
		t.Fatalf("got %s from %s mode %s", resultOf(r), r.Session.RestoredFrom, r.Session.Mode)
	}
	if r.Stdout != "" {
		t.Fatalf("replay leaked output %q", r.Stdout)
	}
}

// TestReplayWithData: cells that imported an upload replay with /data mounted, so the
// session comes back whole.
func TestReplayWithData(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay = true })
	k := "replay-data"
	data := []File{{Name: "lib/rates.py", Data: []byte("VAT = 0.2\n")}, {Name: "prices.csv", Data: []byte("10\n20\n")}}
	exec := func(code string) Result {
		t.Helper()
		r, err := e.Execute(context.Background(), k, Request{Code: code, Data: files(data...)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := exec("import sys; sys.path.append('/data/lib')\nimport rates\ntotal = sum(int(l) for l in open('/data/prices.csv')) * (1 + rates.VAT)"); r.Status != StatusSuccess {
		t.Fatalf("first run: %s", resultOf(r))
	}
	evictLive(t, e, k)
	r := exec("round(total, 2)")
	if r.Status != StatusSuccess || resultOf(r) != "36.0" || r.Session.RestoredFrom != FromReplay || strings.Contains(r.Stderr, "could not be fully restored") {
		t.Fatalf("after replay: %s from %s, stderr %q", resultOf(r), r.Session.RestoredFrom, r.Stderr)
	}
}

func TestSessionsWithJSObjectsFallBackToReplay(t *testing.T) {
	e, _, key := setup(t)
	k := key("jsobj")
	mustSucceed(t, e, k, "import js\nd = js.Object.new()\nd.v = 3\nkept = 'yes'")
	if info := checkpointNow(t, e, k); info.Mode != modeReplay {
		t.Fatalf("mode %s, want replay for a heap holding JS objects", info.Mode)
	}
	evictLive(t, e, k)
	r := mustSucceed(t, e, k, "[kept, d.v]")
	if resultOf(r) != "['yes', 3]" || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("got %s from %s", resultOf(r), r.Session.RestoredFrom)
	}
}

func TestEvictionKeepsMaxLive(t *testing.T) {
	t.Parallel()
	// No background checkpoint: one in flight makes its session busy, and a busy session
	// is never the one evicted (the next oldest would go instead).
	e, _ := newEngine(t, func(c *Config) { c.MaxLive, c.CheckpointDelay = 2, time.Hour })
	for _, k := range []string{"a", "b", "c"} {
		mustSucceed(t, e, k, "v = '"+k+"'")
	}
	n, aLive := e.sess.count(), e.sess.process("a") != nil
	if n != 2 || aLive {
		t.Fatalf("%d live, a live %v; want 2 without the least recently used", n, aLive)
	}
	r := mustSucceed(t, e, "a", "v")
	if resultOf(r) != "'a'" || r.Session.RestoredFrom != FromSnapshot {
		t.Fatalf("got %s from %s", resultOf(r), r.Session.RestoredFrom)
	}
}

// TestRedisLossReplaysHistory: when Redis loses a session (a flush), the caller's record
// of its runs brings it back by replay, and the next save carries the whole history.
func TestRedisLossReplaysHistory(t *testing.T) {
	t.Parallel()
	history := &runLog{}
	e, b := newEngineOn(t, nil, nil, WithHistory(history))
	ctx := context.Background()
	k := "flushed"
	runRecorded := func(code string) Result {
		r, err := e.Execute(ctx, k, Request{Code: code})
		if err != nil || r.Status != StatusSuccess {
			t.Fatalf("Execute(%q): %v %s %+v", code, err, r.Status, r.Error)
		}
		history.add(k, code)
		return r
	}
	runRecorded("counter = 0")
	runRecorded("counter += 1\nnotes = ['kept']")
	// Redis loses everything about the session, seen-marker included, and the warm
	// process is gone too.
	keys, err := b.rdb.Keys(ctx, b.prefix+"sandbox:{"+k+"}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("session keys %v %v", keys, err)
	}
	if err := b.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	r := runRecorded("counter += 1\n(counter, notes)")
	if resultOf(r) != "(2, ['kept'])" || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("after the flush: %s from %s", resultOf(r), r.Session.RestoredFrom)
	}
	// The replayed history is durable again: without the warm process, the next run
	// comes back from Redis with everything.
	evictLive(t, e, k)
	r = runRecorded("(counter, notes)")
	if resultOf(r) != "(2, ['kept'])" || r.Session.RestoredFrom != FromSnapshot {
		t.Fatalf("after eviction: %s from %s", resultOf(r), r.Session.RestoredFrom)
	}
}

// runLog keeps the runs of sessions as a caller's record would (the server's is the
// executions table, which cmd/sandchat's fault tests replay from).
type runLog struct {
	mu   sync.Mutex
	runs map[string][]sandchat.SessionRun
}

func (l *runLog) add(session, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string][]sandchat.SessionRun{}
	}
	now := time.Now()
	l.runs[session] = append(l.runs[session], sandchat.SessionRun{Code: code, Status: StatusSuccess, StartedAt: now, FinishedAt: now})
}

func (l *runLog) SessionRuns(_ context.Context, session string) ([]sandchat.SessionRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sandchat.SessionRun(nil), l.runs[session]...), nil
}
