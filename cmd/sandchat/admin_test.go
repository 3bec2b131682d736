package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

// closedWith reads the socket until the server closes it, and fails unless it closes
// with code; it returns the close frame's text.
func closedWith(t *testing.T, conn *websocket.Conn, code int) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := conn.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != code {
				t.Fatalf("socket closed with %d %q, want %d", ce.Code, ce.Text, code)
			}
			return ce.Text
		}
		if err != nil {
			t.Fatalf("socket: %v, want a close with %d", err, code)
		}
	}
}

// alive checks that a socket still answers.
func (s *socket) alive() {
	s.t.Helper()
	s.send(map[string]string{"type": "ping"})
	s.expect("pong")
}

// cookieSocket opens a socket signed in by a browser session's cookie.
func cookieSocket(t *testing.T, b *browserClient) *websocket.Conn {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(strings.Replace(b.base, "http://", "ws://", 1)+"/api/v1/ws",
		http.Header{"Cookie": {b.cookie.String()}, "Origin": {b.base}})
	if err != nil {
		t.Fatalf("dial by cookie: %v %v", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestAdminAPI: administrators, and nobody else, list users, disable, enable, rename
// and delete them, make, list and revoke their API tokens and browser sessions, and
// read the audit of it all. What is revoked stops at once on every node: the next
// request is 401, and the sockets it opened on another node are closed; a disabled
// user's running turn is cancelled.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	llm := openaitest.New(t, openaitest.Reply{Stall: true})
	model := func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: llm.URL, APIKey: llm.APIKey, Model: "fake-model", MaxRetries: 1}
	}
	env := newEnv(t)
	a, b := env.node(model), env.node(model)
	root, rootID := a.user(t, "root", true)
	bob, bobID := a.user(t, "bob", false)
	_, carolID := a.user(t, "carol", false)
	bobAtB, rootAtB := b.as(t, bob.token), b.as(t, root.token)
	user := func(id int64) string { return fmt.Sprintf("/api/v1/admin/users/%d", id) }

	t.Run("for administrators only", func(t *testing.T) {
		for _, r := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/api/v1/admin/users", nil}, {"GET", user(rootID), nil}, {"PATCH", user(rootID), map[string]bool{"disabled": true}},
			{"DELETE", user(rootID), nil}, {"POST", user(rootID) + "/erase", nil}, {"GET", user(rootID) + "/export", nil},
			{"GET", "/api/v1/admin/tokens", nil}, {"POST", "/api/v1/admin/tokens", map[string]int64{"user_id": bobID}},
			{"POST", "/api/v1/admin/tokens/1/revoke", nil}, {"GET", "/api/v1/admin/sessions", nil},
			{"POST", "/api/v1/admin/sessions/1/revoke", nil}, {"GET", "/api/v1/admin/audit", nil},
			{"GET", "/api/v1/admin/no-such-thing", nil}, {"GET", "/api/v1/sandbox/status", nil},
		} {
			bob.must(403, r.method, r.path, r.body, nil)
		}
		(&client{t: t, base: bob.base}).must(401, "GET", "/api/v1/admin/users", nil, nil)
		root.must(200, "GET", "/api/v1/sandbox/status", nil, nil)
		root.must(404, "GET", "/api/v1/admin/no-such-thing", nil, nil)
		var users []sandchat.Account
		root.must(200, "GET", "/api/v1/admin/users", nil, &users)
		if len(users) != 3 || users[0].ID != rootID || !users[0].Admin || users[1].ID != bobID || users[1].Disabled {
			t.Fatalf("users %+v", users)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		var made struct {
			Token  sandchat.Token `json:"token"`
			Secret string         `json:"secret"`
		}
		root.must(201, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": bobID, "ttl": "720h", "note": "ci"}, &made)
		if made.Token.UserID != bobID || made.Token.ExpiresAt == nil || !strings.HasPrefix(made.Secret, "sct_") {
			t.Fatalf("made %+v", made)
		}
		ci := b.as(t, made.Secret)
		ci.must(200, "GET", "/api/v1/me", nil, nil)
		ciSocket, bobSocket := ci.socket(), bobAtB.socket()
		ciSocket.alive()
		bobSocket.alive()
		// A socket the token opened with a ticket is the token's too.
		var tk ticketJSON
		ci.must(201, "POST", "/api/v1/tickets", map[string]string{"use": "websocket"}, &tk)
		byTicket, resp, err := websocket.DefaultDialer.Dial(strings.Replace(ci.base, "http://", "ws://", 1)+tk.URL, nil)
		if err != nil {
			t.Fatalf("dial with a ticket: %v %v", err, resp)
		}
		defer byTicket.Close()
		var list []sandchat.Token
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/tokens?user_id=%d", bobID), nil, &list)
		if len(list) != 2 || list[1].ID != made.Token.ID || list[1].LastUsedAt == nil || list[1].Note != "ci" || list[1].RevokedAt != nil {
			t.Fatalf("bob's tokens %+v", list)
		}

		var revoked sandchat.Token
		root.must(200, "POST", fmt.Sprintf("/api/v1/admin/tokens/%d/revoke", made.Token.ID), nil, &revoked)
		if revoked.RevokedAt == nil {
			t.Fatalf("revoked %+v", revoked)
		}
		ci.must(401, "GET", "/api/v1/me", nil, nil) // on the other node, at once
		for _, conn := range []*websocket.Conn{ciSocket.conn, byTicket} {
			if why := closedWith(t, conn, 4001); why != "token revoked" {
				t.Fatalf("a socket of the revoked token closed saying %q", why)
			}
		}
		bobSocket.alive() // opened by another token of bob's

		root.must(400, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": bobID, "ttl": "soon"}, nil)
		root.must(400, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": bobID, "ttl": "1s"}, nil)
		root.must(400, "POST", "/api/v1/admin/tokens", map[string]any{"ttl": "1h"}, nil)
		root.must(404, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": 999999}, nil)
		root.must(404, "POST", "/api/v1/admin/tokens/999999/revoke", nil, nil)
		root.must(400, "GET", "/api/v1/admin/tokens?user_id=bob", nil, nil)
	})

	t.Run("a token that expires closes its sockets then", func(t *testing.T) {
		var made struct {
			Token  sandchat.Token `json:"token"`
			Secret string         `json:"secret"`
		}
		root.must(201, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": bobID, "ttl": "1h"}, &made)
		if _, err := a.DB.Exec(context.Background(), `update api_tokens set expires_at = now() + interval '2 seconds' where id = $1`, made.Token.ID); err != nil {
			t.Fatal(err)
		}
		short := b.as(t, made.Secret)
		ws := short.socket()
		if why := closedWith(t, ws.conn, 4001); why != "sign-in expired" {
			t.Fatalf("closed saying %q", why)
		}
		short.must(401, "GET", "/api/v1/me", nil, nil)
	})

	t.Run("browser sessions", func(t *testing.T) {
		_, _, browser := exchange(t, rootAtB.base, mintLink(rootAtB, bobID), nil)
		conn := cookieSocket(t, browser)
		var sessions []sandchat.WebSession
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/sessions?user_id=%d", bobID), nil, &sessions)
		if len(sessions) != 1 || sessions[0].UserID != bobID {
			t.Fatalf("bob's sessions %+v", sessions)
		}
		root.must(200, "POST", fmt.Sprintf("/api/v1/admin/sessions/%d/revoke", sessions[0].ID), nil, nil)
		closedWith(t, conn, 4001)
		if resp, raw := browser.send("GET", "/api/v1/me", nil, nil); resp.StatusCode != 401 {
			t.Fatalf("the revoked session's cookie: %d %s", resp.StatusCode, raw)
		}
		root.must(404, "POST", fmt.Sprintf("/api/v1/admin/sessions/%d/revoke", sessions[0].ID), nil, nil)
	})

	var conv int64
	t.Run("disable ends the user's requests, sockets and turns, enable gives them back", func(t *testing.T) {
		conv = bobAtB.createConversation(0)
		turn := bobAtB.post(conv, "Tell me a long story.")
		eventually(t, 30*time.Second, "the model to be asked", func() bool { return len(llm.Requests()) > 0 })
		ws := bobAtB.socket()
		var acct sandchat.Account
		root.must(200, "PATCH", user(bobID), map[string]bool{"disabled": true}, &acct)
		if !acct.Disabled || acct.DisabledAt == nil {
			t.Fatalf("%+v", acct)
		}
		bobAtB.must(401, "GET", "/api/v1/me", nil, nil)
		bob.must(401, "GET", "/api/v1/conversations", nil, nil)
		if why := closedWith(t, ws.conn, 4001); why != "account disabled" {
			t.Fatalf("closed saying %q", why)
		}
		var status string
		eventually(t, 30*time.Second, "bob's running turn to be cancelled", func() bool {
			_ = a.DB.QueryRow(context.Background(), `select status from turns where id = $1`, turn).Scan(&status)
			return status != "running"
		})
		if status != "cancelled" {
			t.Fatalf("bob's turn ended %s, want cancelled", status)
		}
		root.must(200, "PATCH", user(bobID), map[string]bool{"disabled": false}, &acct)
		bobAtB.must(200, "GET", "/api/v1/me", nil, nil)
		bobAtB.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, nil)
	})

	t.Run("rename and delete", func(t *testing.T) {
		var acct sandchat.Account
		root.must(200, "PATCH", user(bobID), map[string]string{"name": "Bob B."}, &acct)
		if acct.Name != "Bob B." {
			t.Fatalf("%+v", acct)
		}
		root.must(400, "PATCH", user(bobID), map[string]string{}, nil)
		root.must(400, "PATCH", user(bobID), map[string]string{"name": ""}, nil)
		resp, raw := root.rawDo("DELETE", user(bobID), nil)
		if resp.StatusCode != 409 || !strings.Contains(string(raw), "erase") {
			t.Fatalf("delete of a user who owns a conversation: %d %s", resp.StatusCode, raw)
		}
		root.must(409, "DELETE", user(rootID), nil, nil)
		root.must(409, "PATCH", user(rootID), map[string]bool{"disabled": true}, nil)
		root.must(204, "DELETE", user(carolID), nil, nil)
		root.must(404, "GET", user(carolID), nil, nil)
		root.must(404, "DELETE", user(carolID), nil, nil)
	})

	t.Run("audit", func(t *testing.T) {
		var entries []sandchat.AuditEntry
		root.must(200, "GET", "/api/v1/admin/audit", nil, &entries)
		var got []string
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			if e.Actor.UserID != rootID || e.Actor.CLI != "" {
				t.Errorf("%s recorded as done by %+v, want root", e.Action, e.Actor)
			}
			got = append(got, e.Action)
		}
		want := "token.create token.revoke token.create user.login_link session.revoke user.disable user.enable user.rename user.delete"
		if strings.Join(got, " ") != want {
			t.Fatalf("audit, oldest first: %v\nwant %s", got, want)
		}
		var page []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?limit=2&before=%d", entries[0].ID), nil, &page)
		if len(page) != 2 || page[0].ID != entries[1].ID {
			t.Fatalf("page %+v", page)
		}
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", carolID), nil, &page)
		if len(page) != 1 || page[0].Action != sandchat.ActionUserDelete || !strings.Contains(string(page[0].Details), "carol") {
			t.Fatalf("carol's audit %+v", page)
		}
		root.must(400, "GET", "/api/v1/admin/audit?limit=many", nil, nil)
		root.must(400, "GET", "/api/v1/admin/audit?target_id=1", nil, nil)
	})
}
