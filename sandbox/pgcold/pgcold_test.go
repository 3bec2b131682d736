package pgcold_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/internal/state"
	"github.com/sandchat/sandchat/sandbox/pgcold"
	"github.com/sandchat/sandchat/sandbox/redisstore"
)

// deployment is one deployment's state store: its own Redis prefix, the shared database.
type deployment struct {
	t      *testing.T
	st     *redisstore.Store
	rdb    redis.UniversalClient
	prefix string
}

func newDeployment(t *testing.T, db *pgxpool.Pool, ttl time.Duration) *deployment {
	rdb, prefix := testenv.Redis(t)
	return restart(t, db, rdb, prefix, ttl)
}

// restart is a deployment's store as a new process of it makes it.
func restart(t *testing.T, db *pgxpool.Pool, rdb redis.UniversalClient, prefix string, ttl time.Duration) *deployment {
	cold := pgcold.New(pgdb.NewPool(db), prefix, ttl)
	st, err := redisstore.New(rdb, prefix, ttl, redisstore.Options{Cold: cold, HotBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return &deployment{t: t, st: st, rdb: rdb, prefix: prefix}
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// save writes a run's state under the session's lease: the heap and the files given
// (both large enough for the cold tier; no heap keeps the one saved before, as a run
// whose heap is checkpointed later does); it returns the new version.
func (d *deployment) save(session string, from int64, heap []byte, files map[string][]byte) int64 {
	d.t.Helper()
	ctx := context.Background()
	token := state.NewToken()
	if err := d.st.Acquire(ctx, session, token, state.LeaseTTL); err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = d.st.Release(ctx, session, token) }()
	v, _, err := d.st.Save(ctx, session, state.Save{Token: token, From: from, Fresh: from == 0, Base: "base", Build: "build",
		Mode: state.ModeSnapshot, Header: []byte("header"), Delta: heap, Changed: files, Cells: []string{"x = 1"}, Cap: 64 << 20, KeepHeap: heap == nil})
	if err != nil {
		d.t.Fatalf("save: %v", err)
	}
	return v
}

// blobs is the row versions of a session's blobs: hash → xmin and place. A row written
// again (an update included) gets a new xmin.
func blobs(t *testing.T, db *pgxpool.Pool, session string) map[string]string {
	t.Helper()
	rows, err := db.Query(context.Background(), `select hash, xmin::text || ' ' || ctid::text from sandbox_blobs where session = $1`, session)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for rows.Next() {
		var h, v string
		if err := rows.Scan(&h, &v); err != nil {
			t.Fatal(err)
		}
		m[h] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSweepKeepsOtherDeployments: two deployments share one database with their own
// Redis prefixes; the sweep of one with a 1-minute session TTL removes its own expired
// blobs and never the other's, whose session (saved 5 minutes before, with a 24-hour
// TTL) comes back whole.
func TestSweepKeepsOtherDeployments(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	short := newDeployment(t, db, time.Minute)
	long := newDeployment(t, db, 24*time.Hour)

	heap, file := random(512<<10), random(200<<10)
	long.save("conv:1", 0, heap, map[string][]byte{"data.bin": file})
	short.save("conv:1", 0, random(512<<10), nil)
	if n := len(blobs(t, db, long.prefix+"sandbox:conv:1")); n != 2 {
		t.Fatalf("the long-lived deployment's session has %d blobs, want its heap and file", n)
	}
	// Both sessions were last saved 5 minutes ago: past the short TTL, well within the long.
	if _, err := db.Exec(ctx, `update sandbox_blobs set touched_at = now() - interval '5 minutes'`); err != nil {
		t.Fatal(err)
	}

	// The short-lived deployment's next save (a new process of it: its sweep is due) sweeps.
	again := restart(t, db, short.rdb, short.prefix, time.Minute)
	again.save("conv:2", 0, random(512<<10), nil)

	if n := len(blobs(t, db, short.prefix+"sandbox:conv:1")); n != 0 {
		t.Fatalf("the sweep left %d expired blobs of its own deployment", n)
	}
	if n := len(blobs(t, db, long.prefix+"sandbox:conv:1")); n != 2 {
		t.Fatalf("the other deployment's sweep left %d of this one's 2 blobs", n)
	}
	st, err := long.st.Load(ctx, "conv:1", false)
	if err != nil {
		t.Fatalf("the other deployment's session after the sweep: %v", err)
	}
	if string(st.Delta) != string(heap) || string(st.Files["data.bin"]) != string(file) {
		t.Fatal("the other deployment's session came back changed")
	}
}

// TestUnchangedBlobsAreNotRewritten: saves that keep a heap or a file stored before
// write no new version of its row (no dead rows for what did not change), and a
// checkpoint of the same heap writes none either.
func TestUnchangedBlobsAreNotRewritten(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	d := newDeployment(t, db, 24*time.Hour)
	session := d.prefix + "sandbox:conv:1"

	heap, file := random(512<<10), random(200<<10)
	v := d.save("conv:1", 0, heap, map[string][]byte{"data.bin": file})
	before := blobs(t, db, session)
	if len(before) != 2 {
		t.Fatalf("%d blobs after the first save, want the heap and the file", len(before))
	}
	// Runs that change only a small file, then one that stores the same heap again.
	for range 3 {
		v = d.save("conv:1", v, nil, map[string][]byte{"small.txt": random(100)})
	}
	v = d.save("conv:1", v, heap, nil)
	token := state.NewToken()
	if err := d.st.Acquire(ctx, "conv:1", token, state.LeaseTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := d.st.Checkpoint(ctx, "conv:1", state.Checkpoint{Token: token, Version: v, Base: "base", Build: "build",
		Mode: state.ModeSnapshot, Header: []byte("header"), Delta: heap, Cap: 64 << 20}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	_ = d.st.Release(ctx, "conv:1", token)

	after := blobs(t, db, session)
	for h, row := range before {
		if after[h] != row {
			t.Errorf("blob %.12s was rewritten: row %s became %q", h, row, after[h])
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d blobs after, %d before", len(after), len(before))
	}
}
