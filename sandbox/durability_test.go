package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandchat/sandchat/migrations/testenv"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// A run that succeeds after one that failed may build on what the failed one left in
// the interpreter (the log holds only runs that succeeded): it is durable when it
// answers, so a crash right after it loses nothing.
func TestSuccessAfterFailureIsDurable(t *testing.T) {
	e, _, keyOf := setup(t)
	key := keyOf("after-failure")
	mustSucceed(t, e, key, "x = 1")
	if res := run(t, e, key, "y = 5\n1 / 0"); res.Status != StatusError {
		t.Fatalf("the failing run: status %s, want error", res.Status)
	}
	mustSucceed(t, e, key, "z = x + y")
	killAll(t, liveOf(t, e, key).Process())
	res := mustSucceed(t, e, key, "z")
	if got := resultOf(res); got != "6" {
		t.Fatalf("after the crash: z = %s, want 6 (restored from %s, stderr %q)", got, res.Session.RestoredFrom, res.Stderr)
	}
}

// A session that came back without all of its cells (one failed to replay) never has its
// heap saved as its state: the log keeps every cell for a later restore.
func TestPartialRestoreIsNotCheckpointed(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.CheckpointDelay = 24 * time.Hour })
	ctx := context.Background()
	key := "partial"
	mustSucceed(t, e, key, "a = 1")
	// Succeeds now, fails when replayed a few seconds later.
	until := time.Now().Add(5 * time.Second).Unix()
	mustSucceed(t, e, key, fmt.Sprintf("import time\nassert time.time() < %d", until))
	mustSucceed(t, e, key, "b = 2")
	killAll(t, liveOf(t, e, key).Process())
	time.Sleep(time.Until(time.Unix(until+1, 0)))
	res := mustSucceed(t, e, key, "c = 3")
	if !strings.Contains(res.Stderr, "could not be fully restored") {
		t.Fatalf("the restore did not say it was partial: stderr %q", res.Stderr)
	}
	lv := liveOf(t, e, key)
	if err := lv.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	st, err := e.st.Load(ctx, key, false)
	if err != nil || st == nil {
		t.Fatalf("load: %v", err)
	}
	if st.HeapVersion != 0 {
		t.Fatalf("the partial heap was saved as version %d", st.HeapVersion)
	}
	cells, err := e.st.Cells(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cells, func(c string) bool { return strings.Contains(c, "b = 2") }) {
		t.Fatalf("the log lost a cell the restore skipped: %q", cells)
	}
}

// Cells a session was rebuilt from (the caller's history, after the store lost it) join
// its log at the first save, even when the first run after the rebuild fails.
func TestHistoryCellsLoggedAfterAFailure(t *testing.T) {
	t.Parallel()
	history := &runLog{}
	e, b := newEngineOn(t, func(c *Config) { c.ForceReplay = true }, nil, WithHistory(history))
	ctx := context.Background()
	k := "rebuilt"
	for _, code := range []string{"counter = 0", "counter += 1"} {
		mustSucceed(t, e, k, code)
		history.add(k, code)
	}
	keys, err := b.rdb.Keys(ctx, b.prefix+"sandbox:{"+k+"}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("session keys %v %v", keys, err)
	}
	if err := b.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, k, "1 / 0"); r.Status != StatusError || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("first run after the loss: %s from %s", r.Status, r.Session.RestoredFrom)
	}
	mustSucceed(t, e, k, "counter += 1")
	killAll(t, liveOf(t, e, k).Process())
	if r := mustSucceed(t, e, k, "counter"); resultOf(r) != "2" {
		t.Fatalf("after the crash: counter = %s, want 2 (stderr %q)", resultOf(r), r.Stderr)
	}
}

// A save whose answer is lost after it went through (a timeout once the script ran) is
// a save: the run is answered as the success it was, not as "not saved, run it again".
func TestSaveAnswerLost(t *testing.T) {
	t.Parallel()
	var st *lostAnswer
	e, _ := newEngineOn(t, nil, func(c Config) Store {
		st = &lostAnswer{Store: storeFor(testRedis(t), c)}
		return st
	})
	k := "lost-answer"
	mustSucceed(t, e, k, "n = 1")
	st.lose.Store(true)
	r := mustSucceed(t, e, k, "n += 1\nn")
	if resultOf(r) != "2" || r.Session.Version != 2 || st.lose.Load() {
		t.Fatalf("run after a lost answer: %s, version %d (save answered: %v)", resultOf(r), r.Session.Version, !st.lose.Load())
	}
	evictLive(t, e, k)
	if got := resultOf(mustSucceed(t, e, k, "n")); got != "2" {
		t.Fatalf("after eviction: n = %s, want 2 (the run applied once)", got)
	}
}

// lostAnswer saves, then (once, when lose is set) answers as if Redis timed out.
type lostAnswer struct {
	Store
	lose atomic.Bool
}

func (s *lostAnswer) Save(ctx context.Context, session string, r state.Save) (int64, int64, error) {
	v, n, err := s.Store.Save(ctx, session, r)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		return 0, 0, sandchat.RedisError(context.DeadlineExceeded)
	}
	return v, n, err
}

// A run whose caller is gone as it starts is interrupted, not killed: the interrupt goes
// after the run's frame, and one that lands while the Worker loads the code's imports
// (Python, which swallows it) still reaches the code.
func TestInterruptAtStart(t *testing.T) {
	e, _, keyOf := setup(t)
	key := keyOf("interrupt-at-start")
	mustSucceed(t, e, key, "n = 1")
	p := liveOf(t, e, key).Process()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i, code := range []string{"while True:\n    n += 1", "import math\nwhile True:\n    n += 1"} {
		killed := false
		end := p.Run(gone, proc.RunReq{Op: "run", Code: code, Filename: fmt.Sprintf("<start-%d>", i), Data: []proc.DataFile{}, Preload: []string{}},
			nil, proc.RunLimits{Load: 10 * time.Second, Timeout: 10 * time.Second, Grace: 2 * time.Second}, proc.RunHooks{}, func() {
				killed = true
				p.Kill("test: the run ignored the interrupt")
			})
		if killed || end.Stuck || end.Err != nil {
			t.Fatalf("%q with its caller gone: killed %v, stuck %v, err %v", code, killed, end.Stuck, end.Err)
		}
		var r proc.RunReply
		if err := json.Unmarshal(end.Frame.JSON, &r); err != nil || r.Status != StatusTimeout {
			t.Fatalf("%q with its caller gone: reply %+v %v, want a timeout", code, r, err)
		}
	}
}

// A run whose lease is taken from it (the session store lost it, another server holds
// the session) is stopped at once, with a reason, rather than running beside the other
// server's run until its save is refused.
func TestLeaseLostStopsRun(t *testing.T) {
	e, b, keyOf := setup(t)
	key := keyOf("lease-lost")
	mustSucceed(t, e, key, "n = 1")
	lease := skey(e, key, "lease")
	done := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), key, Request{Code: "import time\ntime.sleep(60)"})
		done <- err
	}()
	ctx := context.Background()
	// The run takes its lease.
	testenv.Eventually(t, 20*time.Second, "the lease taken", func() bool { return b.rdb.Get(ctx, lease).Val() != "" })
	// for the engine's LeaseTTL, not longer
	if ttl := b.rdb.PTTL(ctx, lease).Val(); ttl <= 0 || ttl > b.cfg.LeaseTTL {
		t.Fatalf("the lease expires in %v, want within the engine's LeaseTTL (%v)", ttl, b.cfg.LeaseTTL)
	}
	time.Sleep(500 * time.Millisecond)
	if err := b.rdb.Set(ctx, lease, "another-server", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if sandchat.ErrorCode(err) != sandchat.EUNAVAILABLE || !strings.Contains(err.Error(), "lost hold") {
			t.Fatalf("run after its lease was taken: %v, want a 503 that says the lease was lost", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the run went on after its lease was taken")
	}
	if err := b.rdb.Del(ctx, lease).Err(); err != nil {
		t.Fatal(err)
	}
	if got := resultOf(mustSucceed(t, e, key, "n")); got != "1" {
		t.Fatalf("the session after: n = %s", got)
	}
}

// Versions never repeat across a reset: a warm copy of the session from before it (on
// another node) can neither answer for the session nor save into it, however many runs
// the reset session has made since.
func TestResetOnAnotherNode(t *testing.T) {
	t.Parallel()
	e1, b := newEngine(t, nil)
	e2, err := bootEngine(b.cfg, storeFor(b.rdb, b.cfg), testLogger(t))
	if e2 != nil {
		t.Cleanup(func() { _ = e2.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	k := "reset-elsewhere"
	mustSucceed(t, e1, k, "secret = 'before the reset'")
	mustSucceed(t, e1, k, "a = 1")
	if err := e2.Reset(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"b = 1", "c = 1"} {
		if r := mustSucceed(t, e2, k, code); r.Session.Version <= 2 {
			t.Fatalf("after the reset, %q saved version %d, one the session had before it", code, r.Session.Version)
		}
	}
	r := mustSucceed(t, e1, k, "'secret' in globals(), 'c' in globals()")
	if got := resultOf(r); got != "(False, True)" || r.Session.RestoredFrom == FromLive {
		t.Fatalf("the old node after the reset: %s from %s, want (False, True) restored", got, r.Session.RestoredFrom)
	}
}
