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

// TestColdTier: with Postgres as the cold tier, what one session keeps in Redis stays
// under its bound however large its heap and files are; the session comes back whole
// from both tiers, and blobs it no longer names leave Postgres.
func TestColdTier(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	const hot = 1 << 20
	e, b := newEngineOn(t, func(c *Config) { c.HotStateBytes = hot }, func(c Config) Store {
		cold := pgcold.New(pgdb.NewPool(db), c.RedisPrefix, 0)
		st, err := redisstore.New(testRedis(t), c.RedisPrefix, c.SessionTTL, redisstore.Options{Cold: cold, HotBytes: c.HotStateBytes})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
	ctx := context.Background()
	redisBytes := func(k string) int64 {
		var n int64
		for _, part := range []string{"state", "files", "cells", "cold"} {
			m, _ := b.rdb.MemoryUsage(ctx, skey(e, k, part)).Result()
			n += m
		}
		return n
	}
	blobs := func(k string) (n int, size int64) {
		if err := db.QueryRow(ctx, `select count(*), coalesce(sum(size), 0) from sandbox_blobs where session = $1`,
			b.prefix+"sandbox:"+k).Scan(&n, &size); err != nil {
			t.Fatal(err)
		}
		return n, size
	}

	k := "cold"
	// 4 MiB of random bytes in the heap and 3 files of 1 MiB: past the 1 MiB hot bound.
	mustSucceed(t, e, k, "import os\nblob = os.urandom(4 << 20)\nfor i in range(3):\n    open(f'f{i}.bin', 'wb').write(os.urandom(1 << 20))\nsmall = 'kept'")
	info := checkpointNow(t, e, k)
	if info.StateBytes < 7<<20 {
		t.Fatalf("the state counts %d bytes, want its heap and files in both tiers", info.StateBytes)
	}
	if n := redisBytes(k); n > hot {
		t.Fatalf("Redis holds %d bytes of the session, over its %d-byte bound", n, hot)
	}
	if n, size := blobs(k); n != 4 || size < 7<<20 {
		t.Fatalf("postgres holds %d blobs of %d bytes, want the heap and 3 files", n, size)
	}

	evictLive(t, e, k)
	r := mustSucceed(t, e, k, "import hashlib\n(len(blob), small, sorted(p for p in os.listdir('.') if p.endswith('.bin')), os.path.getsize('f2.bin'))")
	if r.Session.RestoredFrom != FromSnapshot || resultOf(r) != "(4194304, 'kept', ['f0.bin', 'f1.bin', 'f2.bin'], 1048576)" {
		t.Fatalf("restored from %s: %s %s", r.Session.RestoredFrom, resultOf(r), r.Stderr)
	}

	// Files deleted and the heap saved again: the blobs no longer named leave Postgres
	// (the new heap is one blob: freed pages keep their bytes, so it stays large).
	mustSucceed(t, e, k, "for i in range(3):\n    os.remove(f'f{i}.bin')\ndel blob")
	checkpointNow(t, e, k)
	if n, _ := blobs(k); n != 1 {
		t.Fatalf("postgres holds %d blobs after the files went, want only the new heap", n)
	}

	// Small files fill the hot bound: they go cold too, and the save holds.
	r = mustSucceed(t, e, k, "for i in range(40):\n    open(f's{i}.txt', 'wb').write(os.urandom(40 << 10))")
	if strings.Contains(r.Stderr, "not saved") {
		t.Fatalf("40 files of 40 KiB: %s", r.Stderr)
	}
	if n := redisBytes(k); n > hot {
		t.Fatalf("Redis holds %d bytes of the session after small files, over its %d-byte bound", n, hot)
	}

	if err := e.Reset(ctx, k); err != nil {
		t.Fatal(err)
	}
	if n, _ := blobs(k); n != 0 {
		t.Fatalf("%d blobs left after a reset", n)
	}
}
