package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// TestAdminFaults: administration through an outage answers 503 naming what is down,
// never a 500; an erase Redis stopped part way leaves the account disabled and its
// conversation in place (its Python state could not be deleted, so neither was it), and
// the same erase, asked again once Redis is back, finishes.
func TestAdminFaults(t *testing.T) {
	t.Parallel()
	f := newFaultEnv(t)
	m := f.node(t)
	root, _ := m.user(t, "root", true)
	alice, aliceID := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	if r := alice.run(conv, "counter += 1"); r.Status != "success" {
		t.Fatalf("%+v", r)
	}
	erase := fmt.Sprintf("/api/v1/admin/users/%d/erase", aliceID)

	f.redis.kill()
	root.unavailable(sandchat.DepRedis, "POST", erase, nil)
	f.redis.start()
	var acct sandchat.Account
	root.must(200, "GET", fmt.Sprintf("/api/v1/admin/users/%d", aliceID), nil, &acct)
	if !acct.Disabled {
		t.Fatalf("alice after the erase Redis stopped: %+v, want disabled", acct)
	}
	alice.must(401, "GET", "/api/v1/me", nil, nil)
	var left int
	if err := m.DB.QueryRow(context.Background(), `select count(*) from conversations where id = $1`, conv).Scan(&left); err != nil || left != 1 {
		t.Fatalf("the conversation after the erase Redis stopped: %d rows (%v), want it kept", left, err)
	}
	root.must(200, "POST", erase, nil, nil)
	root.must(404, "GET", fmt.Sprintf("/api/v1/admin/users/%d", aliceID), nil, nil)

	f.pg.stop()
	root.unavailable(sandchat.DepPostgres, "GET", "/api/v1/admin/users", nil)
	root.unavailable(sandchat.DepPostgres, "POST", "/api/v1/admin/tokens", map[string]int64{"user_id": 1})
	f.pg.start()
	root.must(200, "GET", "/api/v1/admin/users", nil, nil)
}

// TestRevocationNotHeard: a socket closes when its token stops working even where the
// message that closes it is lost. A token revoked during a Redis outage (the revocation
// is committed, its message cannot be sent) closes its socket once the node's
// subscription comes back, before the socket delivers another word; one revoked by a
// command line that publishes under another Redis prefix (an operator's mistake) is
// found by the socket's own periodic check; and a socket whose token no longer works
// subscribes to nothing.
func TestRevocationNotHeard(t *testing.T) {
	t.Parallel()
	f := newFaultEnv(t)
	a := f.node(t)
	b := f.node(t, func(_ *Config, m *Main) { m.CredentialCheck = time.Second })
	root, _ := a.user(t, "root", true)
	bob, bobID := a.user(t, "bob", false)
	conv := bob.createConversation(0)
	token := func(userID int64) (*client, int64) {
		var made struct {
			Token  sandchat.Token `json:"token"`
			Secret string         `json:"secret"`
		}
		root.must(201, "POST", "/api/v1/admin/tokens", map[string]any{"user_id": userID}, &made)
		return a.as(t, made.Secret), made.Token.ID
	}
	elsewhere := func(args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--database-url", f.pg.URL(), "--redis-url", f.redis.URL(), "--redis-prefix", "elsewhere:")
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("sandchat %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
	}

	t.Run("revoked while Redis was away", func(t *testing.T) {
		ws := bob.socket()
		ws.subscribe(conv, nil)
		_, id := token(bobID) // a second token of bob's, to find the first one's id
		var tokens []sandchat.Token
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/tokens?user_id=%d", bobID), nil, &tokens)
		if len(tokens) != 2 || tokens[1].ID != id {
			t.Fatalf("bob's tokens: %+v", tokens)
		}
		f.redis.kill()
		root.must(200, "POST", fmt.Sprintf("/api/v1/admin/tokens/%d/revoke", tokens[0].ID), nil, nil)
		f.redis.start()
		bob.must(401, "GET", "/api/v1/me", nil, nil)
		if why := closedWith(t, ws.conn, 4001); why != "This API token was revoked." {
			t.Fatalf("the revoked token's socket closed saying %q", why)
		}
	})

	t.Run("revoked by a command line on another prefix", func(t *testing.T) {
		carol, id := token(bobID)
		ws := b.as(t, carol.token).socket()
		ws.alive()
		elsewhere("token", "revoke", "--id", strconv.FormatInt(id, 10))
		closedWith(t, ws.conn, 4001)
	})

	t.Run("subscribes to nothing once revoked", func(t *testing.T) {
		dave, id := token(bobID)
		ws := dave.socket() // on a, which checks by itself only every minute
		ws.alive()
		elsewhere("token", "revoke", "--id", strconv.FormatInt(id, 10))
		ws.send(map[string]any{"type": "subscribe", "conversation_id": conv})
		closedWith(t, ws.conn, 4001)
	})
}
