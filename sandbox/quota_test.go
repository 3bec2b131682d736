package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/internal/session"
	"github.com/sandchat/sandchat/sandbox/pgcold"
	"github.com/sandchat/sandchat/sandbox/redisstore"
)

// TestStateKeptIsCounted: every byte the engine keeps for a session counts against its
// cap, and the cap holds in the cold tier at every moment: a save or a checkpoint that
// does not fit writes no blob (it is asked whether it fits first), and the package
// lists a run reports count with the rest.
func TestStateKeptIsCounted(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	const limit = 8 << 20
	e, b := newEngineOn(t, func(c *Config) { c.HotStateBytes, c.MaxStateBytes = 1<<20, limit }, func(c Config) Store {
		cold := pgcold.New(pgdb.NewPool(db), c.RedisPrefix, 0)
		st, err := redisstore.New(testRedis(t), c.RedisPrefix, c.SessionTTL, redisstore.Options{Cold: cold, HotBytes: c.HotStateBytes})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
	ctx := context.Background()
	kept := func(k string) (n int, size int64) {
		t.Helper()
		if err := db.QueryRow(ctx, `select count(*), coalesce(sum(size), 0) from sandbox_blobs where session = $1`,
			b.prefix+"sandbox:"+k).Scan(&n, &size); err != nil {
			t.Fatal(err)
		}
		return n, size
	}

	t.Run("refused saves write nothing", func(t *testing.T) {
		const k = "saves"
		mustSucceed(t, e, k, "import os\nopen('small.bin', 'wb').write(os.urandom(2 << 20))")
		checkpointNow(t, e, k)
		n0, size0 := kept(k)
		for range 5 {
			r := mustSucceed(t, e, k, "open('big.bin', 'wb').write(os.urandom(10 << 20))")
			if !r.Session.NotSaved {
				t.Fatalf("a 10 MiB file was saved under an 8 MiB limit: %q", r.Stderr)
			}
		}
		if n, size := kept(k); n != n0 || size != size0 || size > limit {
			t.Fatalf("after 5 refused saves Postgres holds %d blobs of %d bytes for the session; before them %d of %d", n, size, n0, size0)
		}
	})

	t.Run("a refused checkpoint writes nothing", func(t *testing.T) {
		const k = "heap"
		mustSucceed(t, e, k, "import os\nopen('f.bin', 'wb').write(os.urandom(5 << 20))")
		checkpointNow(t, e, k)
		n0, size0 := kept(k)
		// Within the limit alone (so the process sends it), over it with the file.
		mustSucceed(t, e, k, "blob = os.urandom(4 << 20)")
		if err := liveOf(t, e, k).Checkpoint(ctx); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("a heap past the limit with the files: %v", err)
		}
		if n, size := kept(k); n != n0 || size != size0 {
			t.Fatalf("after a refused checkpoint Postgres holds %d blobs of %d bytes for the session; before it %d of %d", n, size, n0, size0)
		}
	})

	t.Run("package lists count", func(t *testing.T) {
		const k = "packages"
		mustSucceed(t, e, k, "x = 1")
		before := sessionInfo(t, e, k).StateBytes
		// The run's reply is the Worker's word: code that knows the run's number answers
		// for it.
		mustSucceed(t, e, k, "import js\njs.eval(\"addEventListener('message', (e) => { globalThis.lastRun = e.data?.run })\")")
		fr := mustSucceed(t, e, k, `import js
js.eval("""postMessage({op: 'done', run: globalThis.lastRun, status: 'success', result: null, error: null, stdout: '', stderr: '',
  changed: [], omitted: 0, dirs: [], links: [], deleted: [], cwd: null, unkept: 0, outside: [], timings: {}, displaysDropped: 0,
  packages: Array.from({length: 10000}, (_, i) => 'p' + i + 'x'.repeat(180))})""")`)
		// 1.8 MiB of names: counted with the state, or refused for it (here by the 1 MiB
		// the session may keep in Redis).
		if got := sessionInfo(t, e, k).StateBytes; !fr.Session.NotSaved && got-before < 1<<20 {
			t.Fatalf("a run that reported 10,000 packages of 190 bytes was saved, and the state counts %d bytes (%d before)", got, before)
		}
	})
}

// testBudget is a Budget as a conversation's quota gives it: one write at a time, each
// given the room left at its moment (room, which the test moves), or refused (fail).
type testBudget struct {
	t        *testing.T
	held     sync.Mutex // from a reservation to its release
	room     atomic.Int64
	fail     atomic.Bool
	released atomic.Int64
}

func (b *testBudget) budget() Budget {
	return Budget{Reserve: func(context.Context) (int64, func(), error) {
		if b.fail.Load() {
			return 0, nil, sandchat.Errorf(sandchat.EUNAVAILABLE, "The budget cannot be read now.")
		}
		if !b.held.TryLock() {
			b.t.Error("a write reserved while another held its reservation")
			return 0, nil, errors.New("reservation held")
		}
		return b.room.Load(), func() { b.released.Add(1); b.held.Unlock() }, nil
	}}
}

// TestBudgetReserved: each write of a session's state reserves on its run's budget just
// before it is made, and releases after: the run's save, and a checkpoint of its heap
// later, each bounded by the room at its own moment, not at the run's; a write that
// does not fit, or whose reservation fails, keeps the state saved before.
func TestBudgetReserved(t *testing.T) {
	e, _, key := setup(t)
	ctx := context.Background()
	exec := func(k string, b *testBudget, code string) (Result, error) {
		t.Helper()
		return e.Execute(ctx, k, Request{Code: code, Budget: b.budget()})
	}
	held := func(k string) int64 {
		t.Helper()
		n, err := e.StateBytes(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("a save takes the room at its moment", func(t *testing.T) {
		k, b := key("save"), &testBudget{t: t}
		b.room.Store(1 << 20)
		if r, err := exec(k, b, "open('a.bin', 'wb').write(b'a' * 100_000)"); err != nil || r.Session.NotSaved || held(k) < 100_000 || b.released.Load() == 0 {
			t.Fatalf("a save within the room: %v, stderr %q, %d bytes held, %d released", err, r.Stderr, held(k), b.released.Load())
		}
		checkpointNow(t, e, k) // not CheckpointDelay later, between the reads below
		before := held(k)
		b.room.Store(before + 50_000)
		r, err := exec(k, b, "open('b.bin', 'wb').write(b'b' * 200_000)")
		if err != nil || !r.Session.NotSaved || !strings.Contains(r.Stderr, "[sandbox] session state not saved") || held(k) != before {
			t.Fatalf("a save past the room: %v, stderr %q, %d bytes held (%d before)", err, r.Stderr, held(k), before)
		}
		if r.Session.StateBytes != before {
			t.Fatalf("a refused save reports %d bytes of state, want the %d saved before", r.Session.StateBytes, before)
		}
	})

	t.Run("a checkpoint takes the room at its moment", func(t *testing.T) {
		k, b := key("checkpoint"), &testBudget{t: t}
		// The run saves its cell, which fits; its heap, 2 MiB, is saved by a checkpoint
		// after it, which does not while the room stays this small.
		b.room.Store(500_000)
		if r, err := exec(k, b, "import os\nblob = os.urandom(2 << 20)"); err != nil || r.Session.NotSaved {
			t.Fatalf("run: %v %q", err, r.Stderr)
		}
		before := held(k)
		if err := liveOf(t, e, k).Checkpoint(ctx); !errors.Is(err, session.ErrHeapTooLarge) || held(k) != before {
			t.Fatalf("a checkpoint past the room now: %v, %d bytes held (%d before)", err, held(k), before)
		}
		// The room grew since (something else let it go).
		b.room.Store(8 << 20)
		if err := liveOf(t, e, k).Checkpoint(ctx); err != nil || held(k) < 2<<20 {
			t.Fatalf("a checkpoint within the room: %v, %d bytes held", err, held(k))
		}
	})

	t.Run("a reservation that fails keeps the saved state", func(t *testing.T) {
		k, b := key("fails"), &testBudget{t: t}
		b.room.Store(1 << 20)
		if _, err := exec(k, b, "kept = 1"); err != nil {
			t.Fatal(err)
		}
		before := checkpointNow(t, e, k)
		b.fail.Store(true)
		if _, err := exec(k, b, "lost = 2"); sandchat.ErrorCode(err) != sandchat.EUNAVAILABLE {
			t.Fatalf("a save whose reservation failed: %v, want unavailable", err)
		}
		if after := sessionInfo(t, e, k); after.Version != before.Version || after.StateBytes != before.StateBytes {
			t.Fatalf("state after a failed reservation: %+v, before %+v", after, before)
		}
		b.fail.Store(false)
		if r := mustSucceed(t, e, k, "(kept, 'lost' in globals())"); resultOf(r) != "(1, False)" {
			t.Fatalf("the session after a failed reservation: %s", resultOf(r))
		}
	})
}
