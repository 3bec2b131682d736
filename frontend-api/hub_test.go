package frontendapi

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// fakeClient is a socket without a connection: what the hub hands it stays in its
// queue for the test to read.
func fakeClient(h *Hub) *client {
	ctx, cancel := context.WithCancel(context.Background())
	return &client{hub: h, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), convs: map[int64]*convState{}}
}

func (cl *client) taken() []outItem {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	items := cl.queue
	cl.queue, cl.queued = nil, 0
	return items
}

// subscribers is how many connections Redis has subscribed to name.
func (b *hubBundle) subscribers(t *testing.T, name string) int64 {
	t.Helper()
	n, err := b.bus.rdb.PubSubNumSub(context.Background(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[name]
}

// TestHubChannels: a channel is subscribed in Redis when its first local client joins
// and unsubscribed after the last leaves; what Redis delivers reaches exactly the
// clients that joined it.
func TestHubChannels(t *testing.T) {
	t.Parallel()
	b := setupHub(t, WSConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conv := b.bus.ConversationChannel(7)
	one, two, other := fakeClient(b.hub), fakeClient(b.hub), fakeClient(b.hub)
	for _, cl := range []*client{one, two} {
		if err := b.hub.join(ctx, cl, conv, 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.hub.join(ctx, other, b.bus.ConversationChannel(8), 8); err != nil {
		t.Fatal(err)
	}
	if n := b.subscribers(t, conv); n != 1 {
		t.Fatalf("%d subscriptions to a channel two clients joined, want one for the node", n)
	}

	published := func() {
		t.Helper()
		if err := b.bus.rdb.Publish(ctx, conv, `{"type":"message.delta","conversation_id":7,"seq":3}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
	published()
	for _, cl := range []*client{one, two} {
		testenv.Eventually(t, 5*time.Second, "the event delivered", func() bool {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			return len(cl.queue) == 1
		})
		if it := cl.taken()[0]; it.op != opEvent || it.conv != 7 || it.seq != 3 {
			t.Fatalf("item %+v, want the event of conversation 7 with seq 3", it)
		}
	}
	if items := other.taken(); len(items) != 0 {
		t.Fatalf("a client of another conversation got %+v", items)
	}

	b.hub.leave(one, conv)
	if n := b.subscribers(t, conv); n != 1 {
		t.Fatalf("unsubscribed while a client remains (%d)", n)
	}
	published()
	testenv.Eventually(t, 5*time.Second, "the event delivered to the remaining client", func() bool {
		two.mu.Lock()
		defer two.mu.Unlock()
		return len(two.queue) == 1
	})
	if items := one.taken(); len(items) != 0 {
		t.Fatalf("a client that left got %+v", items)
	}
	b.hub.leave(two, conv)
	testenv.Eventually(t, 5*time.Second, "unsubscribed after the last client left", func() bool { return b.subscribers(t, conv) == 0 })
}

// TestHubDeliver: what the dispatcher makes of a message on each kind of channel.
func TestHubDeliver(t *testing.T) {
	t.Parallel()
	b := setupHub(t, WSConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	user := fakeClient(b.hub)
	if err := b.hub.join(ctx, user, b.bus.UserChannel(1), 0); err != nil {
		t.Fatal(err)
	}

	t.Run("a revocation on the user's channel drops a conversation", func(t *testing.T) {
		b.hub.deliver(b.bus.UserChannel(1), []byte(`{"type":"access.revoked","data":{"conversation_id":9}}`))
		if items := user.taken(); len(items) != 1 || items[0].op != opRevoke || items[0].conv != 9 {
			t.Fatalf("items %+v, want one revocation of conversation 9", items)
		}
	})
	t.Run("a toast passes as it is", func(t *testing.T) {
		payload := `{"type":"toast","data":{"message":"hi"}}`
		b.hub.deliver(b.bus.UserChannel(1), []byte(payload))
		if items := user.taken(); len(items) != 1 || items[0].op != opEvent || string(items[0].payload) != payload {
			t.Fatalf("items %+v, want the toast", items)
		}
	})
	t.Run("an undecodable message is dropped and counted", func(t *testing.T) {
		before := counter(t, b.hub.metrics.dropped)
		b.hub.deliver(b.bus.UserChannel(1), []byte(`{not json`))
		if items := user.taken(); len(items) != 0 {
			t.Fatalf("items %+v, want none", items)
		}
		if n := counter(t, b.hub.metrics.dropped); n != before+1 {
			t.Fatalf("dropped %v, want %v", n, before+1)
		}
	})
	t.Run("a channel nobody joined is ignored", func(t *testing.T) {
		b.hub.deliver(b.bus.ConversationChannel(404), []byte(`{"type":"message.delta","conversation_id":404,"seq":1}`))
		if items := user.taken(); len(items) != 0 {
			t.Fatalf("items %+v, want none", items)
		}
	})
}

// TestQueueBound: a client's queue holds frames up to QueueBytes, counting what the
// kernel has not sent yet; the frame that would pass it closes the socket with 1013,
// once, and nothing is queued after.
func TestQueueBound(t *testing.T) {
	t.Parallel()
	const bound = 100
	for _, tc := range []struct {
		name    string
		unsent  int
		frames  []int // payload sizes, in order
		queued  int   // frames queued before the close
		closed  bool
		metrics float64
	}{
		{"within the bound", 0, []int{40, 60}, 2, false, 0},
		{"one byte over", 0, []int{40, 61, 1}, 1, true, 1},
		{"what the kernel holds counts", 50, []int{40, 11}, 1, true, 1},
		{"a frame larger than the bound alone", 0, []int{101}, 0, true, 1},
		{"frames after the close are dropped, counted once", 0, []int{100, 1, 1, 1}, 1, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &Hub{cfg: WSConfig{QueueBytes: bound}.withDefaults(), metrics: newHubMetrics()}
			cl := fakeClient(h)
			cl.unsent = tc.unsent
			for _, n := range tc.frames {
				cl.enqueue(outItem{op: opFrame, payload: make([]byte, n)})
			}
			if got := len(cl.taken()); got != tc.queued {
				t.Fatalf("%d frames queued, want %d", got, tc.queued)
			}
			if closed := cl.ctx.Err() != nil; closed != tc.closed {
				t.Fatalf("closed %v, want %v", closed, tc.closed)
			}
			if tc.closed && cl.closeCode != websocket.CloseTryAgainLater {
				t.Fatalf("close code %d, want 1013", cl.closeCode)
			}
			if n := counter(t, h.metrics.slowClosed); n != tc.metrics {
				t.Fatalf("slow disconnects %v, want %v", n, tc.metrics)
			}
		})
	}
}

// TestCloseCodeFirstWins: a socket already closing for slowness is not told to
// reconnect for a restart, and the reverse.
func TestCloseCodeFirstWins(t *testing.T) {
	t.Parallel()
	h := &Hub{cfg: WSConfig{QueueBytes: 10}.withDefaults(), metrics: newHubMetrics()}
	slow := fakeClient(h)
	slow.enqueue(outItem{op: opFrame, payload: make([]byte, 11)})
	slow.shutdown(closeRestart, "restart")
	if slow.closeCode != closeSlow {
		t.Fatalf("close code %d, want 1013", slow.closeCode)
	}
	restarting := fakeClient(h)
	restarting.shutdown(closeRestart, "restart")
	restarting.enqueue(outItem{op: opFrame, payload: make([]byte, 11)})
	if restarting.closeCode != closeRestart || counter(t, h.metrics.slowClosed) != 1 {
		t.Fatalf("close code %d, slow disconnects %v: want 1012 and the first client's 1", restarting.closeCode, counter(t, h.metrics.slowClosed))
	}
}

// flakyDialer dials Redis for a client whose connections a test can cut: while down it
// refuses to dial, as a Redis failing over does.
type flakyDialer struct {
	mu      sync.Mutex
	down    bool
	refused int
	last    string // local address of the last connection, as Redis names its client
}

func (d *flakyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		d.refused++
		return nil, fmt.Errorf("dial %s: connection refused (the test holds Redis down)", addr)
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.last = conn.LocalAddr().String()
	}
	return conn, err
}

func (d *flakyDialer) hold(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
}

func (d *flakyDialer) seen() (last string, refused int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last, d.refused
}

// TestHubJoinAcrossCut: a socket that joins while the hub's pub/sub connection has just
// been cut (Redis dropped it, and the first dial again failed) is not refused: the hub
// tries the SUBSCRIBE again and go-redis, dialing anew, subscribes every channel, so the
// client already there gets a resync and both get what is published next.
func TestHubJoinAcrossCut(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	dialer := &flakyDialer{}
	opts := *rdb.Options()
	opts.Dialer = dialer.dial
	flaky := redis.NewClient(&opts)
	t.Cleanup(func() { flaky.Close() })
	bus := testBus{rdb: flaky, prefix: prefix}
	h := NewHub(bus, openConversations{}, WSConfig{}, slog.New(slog.NewTextHandler(logWriter{t}, nil)))
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	there, joining := fakeClient(h), fakeClient(h)
	if err := h.join(ctx, there, bus.ConversationChannel(7), 7); err != nil {
		t.Fatal(err)
	}
	dialer.hold(true)
	pubsub, _ := dialer.seen()
	if err := rdb.ClientKillByFilter(ctx, "ADDR", pubsub).Err(); err != nil {
		t.Fatal(err)
	}
	// go-redis has seen the cut and failed to dial again: the next SUBSCRIBE dials and fails.
	testenv.Eventually(t, 5*time.Second, "a dial refused after the cut", func() bool {
		_, refused := dialer.seen()
		return refused > 0
	})
	time.AfterFunc(100*time.Millisecond, func() { dialer.hold(false) })
	if err := h.join(ctx, joining, bus.ConversationChannel(8), 8); err != nil {
		t.Fatalf("join while the pub/sub connection was being restored: %v, want it to wait for the new connection", err)
	}
	for i, cl := range []*client{there, joining} {
		conv := int64(7 + i)
		if err := rdb.Publish(ctx, bus.ConversationChannel(conv), fmt.Sprintf(`{"type":"message.delta","conversation_id":%d,"seq":5}`, conv)).Err(); err != nil {
			t.Fatal(err)
		}
		var got []outItem
		testenv.Eventually(t, 5*time.Second, "the event delivered after the cut", func() bool {
			got = append(got, cl.taken()...)
			return slices.ContainsFunc(got, func(it outItem) bool { return it.op == opEvent && it.conv == conv && it.seq == 5 })
		})
		if conv == 7 && !slices.ContainsFunc(got, func(it outItem) bool { return it.op == opResync }) {
			t.Fatalf("the client joined before the cut got %+v, want a resync for what the cut lost", got)
		}
	}
}
