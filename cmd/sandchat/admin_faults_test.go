package main

import (
	"context"
	"fmt"
	"testing"

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
