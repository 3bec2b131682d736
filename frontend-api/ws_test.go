package frontendapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gorilla/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// testBus is the hub's Redis side under the test's own prefix.
type testBus struct {
	rdb    *redis.Client
	prefix string
}

func (b testBus) PubSub(ctx context.Context) *redis.PubSub { return b.rdb.Subscribe(ctx) }
func (b testBus) ConversationChannel(id int64) string {
	return fmt.Sprintf("%sevents:conv:%d", b.prefix, id)
}
func (b testBus) UserChannel(id int64) string { return fmt.Sprintf("%sevents:user:%d", b.prefix, id) }

// openConversations lets anyone subscribe to any conversation, which has no history.
type openConversations struct{}

func (openConversations) FindConversationByID(_ context.Context, id int64) (*conversations.Conversation, error) {
	return &conversations.Conversation{ID: id}, nil
}
func (openConversations) EventsSince(context.Context, int64, int64, int) ([]conversations.Event, bool, error) {
	return nil, true, nil
}
func (openConversations) LastSeq(context.Context, int64) (int64, error) { return 0, nil }

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// hubBundle is a hub serving WebSockets on a port of its own, for user 1.
type hubBundle struct {
	hub *Hub
	bus testBus
	url string
}

func setupHub(t *testing.T, cfg WSConfig) *hubBundle {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	bus := testBus{rdb: rdb, prefix: prefix}
	h := NewHub(bus, openConversations{}, cfg, slog.New(slog.NewTextHandler(logWriter{t}, nil)))
	s := &Server{hub: h}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		c.SetUserContext(sandchat.WithUser(context.Background(), &sandchat.User{ID: 1, Name: "alice"}))
		return c.Next()
	})
	app.Get("/ws", s.websocket())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() {
		h.CloseAll()
		_ = app.ShutdownWithTimeout(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Wait(ctx)
		_ = h.Close()
	})
	return &hubBundle{hub: h, bus: bus, url: "ws://" + ln.Addr().String() + "/ws"}
}

// dial opens a socket whose receive buffer is rcvbuf bytes.
func (b *hubBundle) dial(t *testing.T, rcvbuf int) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: testenv.ReceiveBuffer(rcvbuf)}).DialContext}
	conn, _, err := d.Dial(b.url, http.Header{})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	testenv.Eventually(t, 5*time.Second, "the socket to register", func() bool { return b.hub.Clients() > 0 })
	return conn
}

// flood hands n frames of size bytes to user 1's sockets, as the bus would.
func (b *hubBundle) flood(n, size int) {
	pad := strings.Repeat("x", size)
	for i := range n {
		payload, _ := json.Marshal(map[string]any{"type": "toast", "data": map[string]any{"i": i, "pad": pad}})
		b.hub.deliver(b.bus.UserChannel(1), payload)
	}
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestWriteTimeoutIsSlow: with a queue bound too large to trip, a client that stopped
// reading still blocks a write once the kernel's buffers are full; that write's deadline
// closes it as too slow, counted like one that passed the bound.
func TestWriteTimeoutIsSlow(t *testing.T) {
	t.Parallel()
	b := setupHub(t, WSConfig{QueueBytes: 1 << 30, WriteTimeout: 300 * time.Millisecond})
	b.dial(t, 4<<10)
	b.flood(300, 64<<10)
	testenv.Eventually(t, 5*time.Second, "the stalled socket closed", func() bool { return b.hub.Clients() == 0 })
	if n := counter(t, b.hub.metrics.slowClosed); n != 1 {
		t.Fatalf("slow disconnects %v, want 1", n)
	}
}
