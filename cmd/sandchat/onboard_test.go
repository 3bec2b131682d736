package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestSandboxDefault: SANDCHAT_SANDBOX_DEFAULT decides the Python sandbox where neither
// the conversation nor its agent does, and only there; unset, it is off.
func TestSandboxDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plain := e.node()
	alice, _ := plain.user(t, "alice", false)
	off := alice.createAgent(map[string]any{"name": "Writer", "internal_tools": map[string]bool{"pyodide_sandbox": false}})
	noAgent, withOff, overridden := alice.createConversation(0), alice.createConversation(off.ID), alice.createConversation(0)
	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", overridden), map[string]any{"enabled": false}, nil)

	if st := alice.tool(noAgent, "pyodide_sandbox"); st.Enabled || st.Source != "default" {
		t.Fatalf("without the setting: %+v, want off from the default", st)
	}
	on := e.node(func(c *Config, _ *Main) { c.Sandbox.Default = "on" }).as(t, alice.token)
	for _, tc := range []struct {
		name    string
		conv    int64
		enabled bool
		source  string
	}{
		{"no agent, no setting: the deployment's on", noAgent, true, "default"},
		{"the agent's off wins", withOff, false, "agent"},
		{"the conversation's off wins", overridden, false, "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := on.tool(tc.conv, "pyodide_sandbox"); st.Enabled != tc.enabled || st.Source != tc.source {
				t.Fatalf("%+v, want enabled=%v source=%s", st, tc.enabled, tc.source)
			}
		})
	}
	t.Run("swarm mode keeps its own default", func(t *testing.T) {
		if st := on.tool(noAgent, "swarm_mode"); st.Enabled {
			t.Fatalf("%+v", st)
		}
	})
}

// TestRetryWithSandboxOn: a newcomer's first code meets the sandbox off; the offline
// model says so and does not claim to run Python; once the user switches it on, the
// same message is answered again and its code runs, and later turns see only that
// answer. Only an editor may ask, only for the latest message, and not mid-turn.
func TestRetryWithSandboxOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "vera", false)
	stranger, _ := m.user(t, "sam", false)
	conv := alice.createConversation(0)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	retry := func(msg int64) string { return fmt.Sprintf("/api/v1/conversations/%d/messages/%d/retry", conv, msg) }

	if _, answer := alice.say(conv, "what can you do?"); strings.Contains(answer, "I will run") || !strings.Contains(answer, "cannot run code") {
		t.Fatalf("with the sandbox off, asked what it can do: %q", answer)
	}
	status, answer := alice.say(conv, py("x = 6 * 7\nprint(x)"))
	if status != "completed" || !strings.Contains(answer, "The Python sandbox is off here") {
		t.Fatalf("first code: %s %q", status, answer)
	}
	msgs := alice.messages(conv)
	first, code := msgs[0].ID, msgs[len(msgs)-2].ID
	if msgs[len(msgs)-2].Role != "user" {
		t.Fatalf("messages %+v", msgs)
	}

	t.Run("refused while the sandbox is off is answered the same", func(t *testing.T) {
		var r struct {
			TurnID int64 `json:"turn_id"`
		}
		alice.must(202, "POST", retry(code), nil, &r)
		alice.finishTurn(conv, r.TurnID)
		if msgs := alice.messages(conv); !strings.Contains(msgs[len(msgs)-1].Content, "The Python sandbox is off here") {
			t.Fatalf("answered %q", msgs[len(msgs)-1].Content)
		}
	})
	t.Run("who may ask", func(t *testing.T) {
		viewer.must(403, "POST", retry(code), nil, nil)
		stranger.must(404, "POST", retry(code), nil, nil)
		alice.must(409, "POST", retry(first), nil, nil)
		alice.must(404, "POST", retry(msgs[len(msgs)-1].ID), nil, nil) // an assistant message
		alice.must(404, "POST", retry(code+1000), nil, nil)
		alice.must(404, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages/x/retry", conv), nil, nil)
	})

	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": true}, nil)
	var r struct {
		TurnID int64 `json:"turn_id"`
	}
	alice.must(202, "POST", retry(code), nil, &r)
	if tj := alice.finishTurn(conv, r.TurnID); tj.Status != "completed" {
		t.Fatalf("retry %+v", tj)
	}
	var stdout string
	if err := m.DB.QueryRow(context.Background(), `select convert_from(stdout, 'UTF8') from executions where turn_id = $1`, r.TurnID).Scan(&stdout); err != nil || stdout != "42\n" {
		t.Fatalf("the retry's run printed %q (%v)", stdout, err)
	}
	msgs = alice.messages(conv)
	if last := msgs[len(msgs)-1]; last.Role != "assistant" || !strings.Contains(last.Content, "42") {
		t.Fatalf("the retry answered %+v", last)
	}
	// The turn after sees the code's run, not the refusals: x is defined and it says so.
	if _, answer := alice.say(conv, py("print(x + 1)")); !strings.Contains(answer, "43") {
		t.Fatalf("the next turn: %q", answer)
	}
	if _, answer := alice.say(conv, "what can you do?"); !strings.Contains(answer, "I will run it") {
		t.Fatalf("with the sandbox on, asked what it can do: %q", answer)
	}
}
