package frontendapi

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestStalledReaderDuringAFlood is the stalled socket as it happens: a client on the
// kernel's own, autotuned buffers stops reading while a turn floods ~12 MB of events
// (tool output in frames of up to 16 KiB, with token deltas between them), silent or
// sending the protocol's ping every second. Most of the flood fits in the two kernels'
// buffers, so no write of the server's need block and the queue bound need not trip:
// the server must still see that nothing it wrote is being taken, let go of the socket
// within 15 s of the flood's end, counted as a slow disconnect, and tear its end down
// once the linger is over.
func TestStalledReaderDuringAFlood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ping bool
	}{{"silent", false}, {"pinging every second", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupHub(t, WSConfig{}) // the defaults: a 4 MiB bound, 10 s per write
			d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: testenv.ReceiveBuffer(clientBuffer)}).DialContext}
			conn, _, err := d.Dial(b.url, http.Header{})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			t.Cleanup(func() { conn.Close() })
			testenv.Eventually(t, 5*time.Second, "the socket to register", func() bool { return b.hub.Clients() > 0 })
			if tc.ping {
				stop := make(chan struct{})
				t.Cleanup(func() { close(stop) })
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Second):
							if conn.WriteJSON(map[string]any{"type": "ping"}) != nil {
								return
							}
						}
					}
				}()
			}

			// The client reads the first part as it comes, so its kernel grows its receive
			// buffer for a fast reader, then its application stalls.
			var read atomic.Int64
			stalled := make(chan struct{})
			go func() {
				defer close(stalled)
				for read.Load() < readFirst {
					_, data, err := conn.ReadMessage()
					if err != nil {
						return
					}
					read.Add(int64(len(data)))
				}
			}()
			output := strings.Repeat("o", 16<<10)
			sent := 0
			for i := 0; sent < 12<<20; i++ {
				if int64(sent) >= readFirst {
					<-stalled
				}
				var payload []byte
				if i%4 == 3 {
					payload, _ = json.Marshal(map[string]any{"type": "message.delta", "conversation_id": 0, "data": map[string]any{"i": i, "delta": "token "}})
				} else {
					payload, _ = json.Marshal(map[string]any{"type": "tool.output", "conversation_id": 0, "data": map[string]any{"i": i, "stream": "stdout", "text": output}})
				}
				b.hub.deliver(b.bus.UserChannel(1), payload)
				sent += len(payload)
				if i%64 == 63 {
					time.Sleep(5 * time.Millisecond) // a turn's pace, not one burst
				}
			}
			end := time.Now()
			within := 15 * time.Second
			testenv.Eventually(t, within, "the server let go of the stalled socket", func() bool { return b.hub.Clients() == 0 })
			if n := counter(t, b.hub.metrics.slowClosed); n != 1 {
				t.Fatalf("slow disconnects %v, want 1", n)
			}
			// Its side is freed, not left to the kernel: the client, which read nothing
			// within the linger, has its end reset.
			testenv.Eventually(t, within+b.hub.cfg.SlowLinger-time.Since(end), "the server's end torn down", func() bool { return tcpStateOf(t, conn.NetConn()) == 7 /* TCP_CLOSE */ })
			t.Logf("freed %s after the flood's end", time.Since(end).Round(100*time.Millisecond))
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				if _, _, err := conn.ReadMessage(); err != nil {
					if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
						t.Fatalf("the server still holds the connection: %v", err)
					}
					if !websocket.IsCloseError(err, websocket.CloseTryAgainLater, websocket.CloseAbnormalClosure) && !errors.Is(err, syscall.ECONNRESET) {
						t.Fatalf("the stalled client ended with %v, want 1013, an abrupt close or a reset", err)
					}
					break
				}
			}
		})
	}
}

// clientBuffer is the receive buffer Linux grows for a client that read fast across a
// network (autotuning sizes it to twice what the path holds, up to tcp_rmem's 32 MiB
// here); over loopback the path holds next to nothing, so the test sets it (the kernel
// doubles it, to 8 MiB). The flood's last ~6 MiB fit in it, acknowledged, and the
// server's kernel holds the rest, under the queue bound, without a write blocking.
const clientBuffer = 4 << 20

// readFirst is how much of the flood the client reads before it stalls.
const readFirst = 4 << 20

// eventuallyWithin polls fn until it holds or within has passed.

// tcpStateOf is the state of a TCP connection as the kernel sees it.
func tcpStateOf(t *testing.T, conn net.Conn) uint8 {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	if cerr := raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// TestSlowClientReadsItsClose: a client dropped as too slow is told so: the server lets
// go of it at once and counts it, its close frame (1013) waits behind what the client
// had not read, and a client that reads again within the linger reads everything, the
// close last, without a reset. A client that stops answering pings (it reads nothing at
// all) is dropped, counted and told the same way.
func TestSlowClientReadsItsClose(t *testing.T) {
	t.Parallel()
	readToClose := func(t *testing.T, conn *websocket.Conn) (frames int) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			_, _, err := conn.ReadMessage()
			if err == nil {
				frames++
				continue
			}
			if !websocket.IsCloseError(err, websocket.CloseTryAgainLater) {
				t.Fatalf("after %d frames the client read %v, want close 1013", frames, err)
			}
			return frames
		}
	}
	t.Run("stalled behind a flood", func(t *testing.T) {
		t.Parallel()
		b := setupHub(t, WSConfig{WriteTimeout: time.Second, SlowLinger: time.Minute})
		conn := b.dial(t, 16<<10)
		const n = 400
		b.flood(n, 16<<10) // 6.4 MB, far more than the two kernels hold
		testenv.Eventually(t, 30*time.Second, "the server let go of the stalled socket", func() bool { return b.hub.Clients() == 0 })
		if c := counter(t, b.hub.metrics.slowClosed); c != 1 {
			t.Fatalf("slow disconnects %v, want 1", c)
		}
		frames := readToClose(t, conn)
		if frames == 0 || frames >= n {
			t.Fatalf("read %d of %d frames before the close: want those the kernels held, not all", frames, n)
		}
		t.Logf("read %d of %d frames, then 1013", frames, n)
	})
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		b := setupHub(t, WSConfig{PingInterval: 100 * time.Millisecond, PongWait: 500 * time.Millisecond, SlowLinger: time.Minute})
		conn := b.dial(t, 64<<10)
		testenv.Eventually(t, 10*time.Second, "the server dropped the client that answers no ping", func() bool { return b.hub.Clients() == 0 })
		if c := counter(t, b.hub.metrics.slowClosed); c != 1 {
			t.Fatalf("slow disconnects %v, want 1", c)
		}
		readToClose(t, conn)
	})
}
