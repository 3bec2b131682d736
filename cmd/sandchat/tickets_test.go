package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// ticketJSON is the answer to POST /api/v1/tickets.
type ticketJSON struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	URL       string    `json:"url"`
}

// TestTickets: a socket and a download open with a ticket in the URL instead of a
// token. A ticket works once, for the request it was made for, within seconds, and only
// while the token or session that made it still signs its user in; only its hash is
// kept, and no line the server logs carries a token or a ticket.
func TestTickets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logBuffer{}
	m := e.node(func(_ *Config, m *Main) {
		m.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	base := "http://" + m.Addr()
	alice, aliceID := m.user(t, "alice", false)
	bob, _ := m.user(t, "bob", false)
	conv := alice.createConversation(0)
	status, raw := alice.uploadAt(conv, "notes.txt", "", "alice's notes")
	var file struct{ ID int64 }
	if err := json.Unmarshal(raw, &file); status != 201 || err != nil {
		t.Fatalf("upload: %d %s", status, raw)
	}
	var secrets []string // every secret the test saw, none of which may reach a log
	ticket := func(c *client, body map[string]any) ticketJSON {
		t.Helper()
		var tk ticketJSON
		c.must(201, "POST", "/api/v1/tickets", body, &tk)
		if !strings.HasPrefix(tk.Ticket, "sctk_") || time.Until(tk.ExpiresAt) > 31*time.Second || !strings.HasSuffix(tk.URL, "?ticket="+tk.Ticket) {
			t.Fatalf("ticket %+v: want sctk_… working for 30 s, and the URL that uses it", tk)
		}
		secrets = append(secrets, tk.Ticket)
		return tk
	}
	download := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	dial := func(url string, origin string) (*websocket.Conn, int) {
		t.Helper()
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		conn, resp, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http://", "ws://", 1)+url, h)
		if err != nil {
			if resp == nil {
				t.Fatalf("dial: %v", err)
			}
			return nil, resp.StatusCode
		}
		t.Cleanup(func() { conn.Close() })
		return conn, 101
	}
	secrets = append(secrets, alice.token, bob.token)

	t.Run("a download, once", func(t *testing.T) {
		tk := ticket(alice, map[string]any{"use": "download", "file_id": file.ID})
		if status, body := download(tk.URL); status != 200 || body != "alice's notes" {
			t.Fatalf("download by ticket: %d %q", status, body)
		}
		if status, _ := download(tk.URL); status != 401 {
			t.Fatalf("the same ticket again: %d, want 401", status)
		}
	})
	t.Run("for its own request only", func(t *testing.T) {
		other := ticket(alice, map[string]any{"use": "download", "file_id": file.ID + 1000})
		if status, _ := download(fmt.Sprintf("/api/v1/files/%d?ticket=%s", file.ID, other.Ticket)); status != 401 {
			t.Fatalf("another file's ticket: %d, want 401", status)
		}
		socketTicket := ticket(alice, map[string]any{"use": "websocket"})
		if status, _ := download(fmt.Sprintf("/api/v1/files/%d?ticket=%s", file.ID, socketTicket.Ticket)); status != 401 {
			t.Fatalf("a socket's ticket for a download: %d, want 401", status)
		}
		if _, status := dial(socketTicket.URL, ""); status != 401 {
			t.Fatalf("the socket's ticket, spent on the download: %d, want 401", status)
		}
		fileTicket := ticket(alice, map[string]any{"use": "download", "file_id": file.ID})
		if _, status := dial("/api/v1/ws?ticket="+fileTicket.Ticket, ""); status != 401 {
			t.Fatalf("a download's ticket for a socket: %d, want 401", status)
		}
		me := ticket(alice, map[string]any{"use": "websocket"})
		if resp, _ := (&client{t: t, base: base}).rawDo("GET", "/api/v1/me?ticket="+me.Ticket, nil); resp.StatusCode != 401 {
			t.Fatalf("a ticket anywhere else: %d, want 401", resp.StatusCode)
		}
		for _, body := range []map[string]any{{"use": "anything"}, {"use": "download"}, {"use": "websocket", "file_id": file.ID}} {
			alice.must(400, "POST", "/api/v1/tickets", body, nil)
		}
		// Another user's ticket opens only what that user may see.
		bobs := ticket(bob, map[string]any{"use": "download", "file_id": file.ID})
		if status, _ := download(bobs.URL); status != 404 {
			t.Fatalf("bob's ticket for alice's file: %d, want 404", status)
		}
	})
	t.Run("a socket, as its user", func(t *testing.T) {
		tk := ticket(alice, map[string]any{"use": "websocket"})
		conn, status := dial(tk.URL, "")
		if status != 101 {
			t.Fatalf("socket by ticket: %d", status)
		}
		s := &socket{t: t, conn: conn}
		s.send(map[string]any{"type": "subscribe", "conversation_id": conv})
		s.expect("subscribed")
		if _, status := dial(tk.URL, ""); status != 401 {
			t.Fatalf("the same ticket again: %d, want 401", status)
		}
	})
	t.Run("kept hashed, for seconds", func(t *testing.T) {
		tk := ticket(alice, map[string]any{"use": "websocket"})
		keys, err := e.rdb.Keys(context.Background(), e.redisPrefix+"ticket:*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("ticket keys %v, %v", keys, err)
		}
		for _, k := range keys {
			v, _ := e.rdb.Get(context.Background(), k).Result()
			ttl, _ := e.rdb.PTTL(context.Background(), k).Result()
			if strings.Contains(k+v, tk.Ticket) || strings.Contains(k+v, alice.token) || ttl <= 0 || ttl > 30*time.Second {
				t.Fatalf("key %s = %s (ttl %s): want no secret and a life of at most 30 s", k, v, ttl)
			}
		}
	})
	t.Run("only as good as the token that made it", func(t *testing.T) {
		carol, carolID := m.user(t, "carol", false)
		secrets = append(secrets, carol.token)
		tk := ticket(carol, map[string]any{"use": "websocket"})
		if _, err := m.DB.Exec(context.Background(), `delete from api_tokens where user_id = $1`, carolID); err != nil {
			t.Fatal(err)
		}
		if _, status := dial(tk.URL, ""); status != 401 {
			t.Fatalf("a ticket whose token is gone: %d, want 401", status)
		}
	})
	t.Run("only as good as the session that made it", func(t *testing.T) {
		admin, _ := m.user(t, "admin", true)
		secrets = append(secrets, admin.token)
		_, _, browser := exchange(t, base, mintLink(admin, aliceID), nil)
		secrets = append(secrets, browser.cookie.Value)
		mint := func() ticketJSON {
			resp, raw := browser.send("POST", "/api/v1/tickets", map[string]any{"use": "websocket"}, nil)
			var tk ticketJSON
			if err := json.Unmarshal(raw, &tk); resp.StatusCode != 201 || err != nil {
				t.Fatalf("ticket by session: %d %s", resp.StatusCode, raw)
			}
			secrets = append(secrets, tk.Ticket)
			return tk
		}
		if _, status := dial(mint().URL, "https://evil.example"); status != 403 {
			t.Fatalf("a session's ticket from another origin: %d, want 403", status)
		}
		conn, status := dial(mint().URL, base)
		if status != 101 {
			t.Fatalf("a session's ticket: %d", status)
		}
		late := mint()
		if resp, raw := browser.send("POST", "/api/v1/auth/logout", nil, nil); resp.StatusCode != 204 {
			t.Fatalf("logout: %d %s", resp.StatusCode, raw)
		}
		// The socket is the session's: its sign-out closes it.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				if !websocket.IsCloseError(err, 4001) {
					t.Fatalf("the session's socket after sign-out: %v, want close 4001", err)
				}
				break
			}
		}
		if _, status := dial(late.URL, base); status != 401 {
			t.Fatalf("a ticket whose session ended: %d, want 401", status)
		}
	})
	t.Run("the old access_token still works", func(t *testing.T) {
		if status, body := download(fmt.Sprintf("/api/v1/files/%d?access_token=%s", file.ID, alice.token)); status != 200 || body != "alice's notes" {
			t.Fatalf("download by access_token: %d %q", status, body)
		}
	})
	t.Run("no secret in the logs", func(t *testing.T) {
		all := logs.String()
		if !strings.Contains(all, "level=") {
			t.Fatalf("the server logged nothing at all: the check would prove nothing")
		}
		for _, s := range secrets {
			if strings.Contains(all, s) {
				t.Fatalf("a log line carries the secret %s…", s[:8])
			}
		}
	})
}
