package pgstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// poolOf is a pool of at most size connections on the schema of url.
func poolOf(t *testing.T, url string, size int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = size
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestQuotaLock: a write the store does not make (a session's save) holds the
// conversation's quota lock from its check to its end; an upload that comes meanwhile
// waits, then meets what that write left. Waiting for the lock takes only connections
// of the lock's own pool: the holder, which writes elsewhere with the main pool (the
// cold tier), always gets one.
func TestQuotaLock(t *testing.T) {
	url := testenv.DatabaseURL(t)
	main, locks := poolOf(t, url, 1), poolOf(t, url, 2)
	store := New(main, time.Hour, Options{QuotaLocks: locks})
	ctx := context.Background()
	var uid int64
	if err := main.QueryRow(ctx, `insert into users (name) values ('alice') returning id`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	alice := sandchat.WithUser(ctx, &sandchat.User{ID: uid, Name: "alice"})
	conv, err := store.CreateConversation(alice, nil, "quota")
	if err != nil {
		t.Fatal(err)
	}
	var state atomic.Int64 // what the conversation's sessions hold
	q := conversations.Quota{Limit: 8 << 20, State: func(context.Context, conversations.FileUsage) (int64, error) { return state.Load(), nil }}

	files, unlock, err := store.LockQuota(ctx, conv.ID)
	if err != nil || files.Uploads != 0 {
		t.Fatalf("lock: %+v %v", files, err)
	}
	uploaded := make(chan error, 1)
	go func() {
		_, _, err := store.UploadFile(alice, conv.ID, "input.bin", "", make([]byte, 4<<20), q)
		uploaded <- err
	}()
	testenv.Eventually(t, 30*time.Second, "the upload to wait for the quota lock", func() bool {
		var waiting int
		_ = main.QueryRow(ctx, `select count(*) from pg_locks where locktype = 'advisory' and not granted and classid = $1::oid and objid = $2::oid`,
			quotaLockSpace, uint32(conv.ID)).Scan(&waiting)
		return waiting == 1
	})
	// The lock's pool is full (the holder, the waiting upload); the main pool still serves.
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := store.FileUsage(qctx, conv.ID); err != nil {
		t.Fatalf("the main pool while writers wait for the quota lock: %v", err)
	}
	cancel()
	select {
	case err := <-uploaded:
		t.Fatalf("the upload went through the held lock: %v", err)
	default:
	}
	state.Store(5 << 20) // the holder's write: a session saved 5 MiB
	unlock()
	if err := <-uploaded; sandchat.ErrorCode(err) != sandchat.ETOOLARGE {
		t.Fatalf("an upload after a save that left no room for it: %v, want too large", err)
	}
	if files, err := store.FileUsage(ctx, conv.ID); err != nil || files.Uploads != 0 {
		t.Fatalf("files after the refused upload: %+v %v", files, err)
	}
}
