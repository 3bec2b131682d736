package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/migrations/testenv"
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
		if err := e.ckpt.live(ctx, liveOf(t, e, k)); err == nil || !strings.Contains(err.Error(), "limit") {
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
  changed: [], omitted: 0, deleted: [], outside: [], timings: {}, displaysDropped: 0,
  packages: Array.from({length: 10000}, (_, i) => 'p' + i + 'x'.repeat(180))})""")`)
		// 1.8 MiB of names: counted with the state, or refused for it (here by the 1 MiB
		// the session may keep in Redis).
		if got := sessionInfo(t, e, k).StateBytes; !fr.Session.NotSaved && got-before < 1<<20 {
			t.Fatalf("a run that reported 10,000 packages of 190 bytes was saved, and the state counts %d bytes (%d before)", got, before)
		}
	})
}
