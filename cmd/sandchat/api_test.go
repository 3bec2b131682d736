package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/sandchat/sandchat/migrations/testenv"

	"github.com/sandchat/sandchat/sandbox"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	admin, _ := m.user(t, "admin", true)
	alice, _ := m.user(t, "alice", false)

	routes := []struct{ method, path string }{
		{"GET", "/api/v1/me"}, {"POST", "/api/v1/users"}, {"GET", "/api/v1/internal-tools"},
		{"GET", "/api/v1/agents"}, {"POST", "/api/v1/agents"}, {"GET", "/api/v1/agents/1"},
		{"PUT", "/api/v1/agents/1"}, {"DELETE", "/api/v1/agents/1"}, {"GET", "/api/v1/agents/1/members"},
		{"GET", "/api/v1/conversations"}, {"POST", "/api/v1/conversations"}, {"GET", "/api/v1/conversations/1"},
		{"GET", "/api/v1/conversations/1/internal-tools"}, {"PUT", "/api/v1/conversations/1/internal-tools/pyodide_sandbox"},
		{"POST", "/api/v1/conversations/1/messages/1/retry"},
		{"GET", "/api/v1/ws"},
	}
	for _, r := range routes {
		t.Run("no token "+r.method+" "+r.path, func(t *testing.T) {
			if got := m.as(t, "").do(r.method, r.path, nil, nil); got != 401 {
				t.Fatalf("status %d, want 401", got)
			}
			if got := m.as(t, "sct_not-a-real-token").do(r.method, r.path, nil, nil); got != 401 {
				t.Fatalf("bad token: status %d, want 401", got)
			}
		})
	}

	t.Run("admin creates a user whose token works", func(t *testing.T) {
		var out struct {
			User  struct{ ID int64 }
			Token string
		}
		admin.must(201, "POST", "/api/v1/users", map[string]any{"name": "bob"}, &out)
		var me struct{ Name string }
		m.as(t, out.Token).must(200, "GET", "/api/v1/me", nil, &me)
		if me.Name != "bob" {
			t.Fatalf("me = %+v", me)
		}
	})
	t.Run("non-admin cannot create users", func(t *testing.T) {
		alice.must(403, "POST", "/api/v1/users", map[string]any{"name": "mallory", "admin": true}, nil)
	})
	t.Run("empty user name", func(t *testing.T) {
		admin.must(400, "POST", "/api/v1/users", map[string]any{"name": " "}, nil)
	})
	t.Run("websocket token in query", func(t *testing.T) {
		conn, _, err := alice.dial(nil, "?access_token="+alice.token)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		_, resp, err := alice.dial(nil, "?access_token=sct_wrong")
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("bad query token: err %v resp %v", err, resp)
		}
	})
	t.Run("websocket origin not allowed", func(t *testing.T) {
		_, resp, err := alice.dial(http.Header{"Authorization": {"Bearer " + alice.token}, "Origin": {"https://evil.example"}}, "")
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Fatalf("foreign origin: err %v resp %v", err, resp)
		}
	})
}

func TestAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)

	a := alice.createAgent(map[string]any{"name": "Analyst", "system_prompt": "Be brief.", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	if a.Version != 1 || !a.InternalTools["pyodide_sandbox"] || a.Role != "owner" || a.Children == nil || a.Preload == nil || len(a.Preload) != 0 {
		t.Fatalf("created %+v", a)
	}

	t.Run("update bumps version", func(t *testing.T) {
		var got agentJSON
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 1, "name": "Analyst 2", "internal_tools": map[string]bool{"pyodide_sandbox": false}}, &got)
		if got.Version != 2 || got.Name != "Analyst 2" || got.InternalTools["pyodide_sandbox"] {
			t.Fatalf("updated %+v", got)
		}
	})
	t.Run("modules to preload", func(t *testing.T) {
		var got agentJSON
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 2, "preload": []string{"numpy", "dateutil.parser"}}, &got)
		if got.Version != 3 || strings.Join(got.Preload, ",") != "numpy,dateutil.parser" {
			t.Fatalf("updated %+v", got)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 3, "name": "Analyst 2"}, &got)
		if strings.Join(got.Preload, ",") != "numpy,dateutil.parser" {
			t.Fatalf("an update without preload changed it: %+v", got)
		}
		for _, bad := range [][]string{{"numpy; rm -rf /"}, {"../x"}, {"python-dateutil"}, {""}} {
			alice.must(400, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 4, "preload": bad}, nil)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 4, "preload": []string{}}, &got)
		if got.Version != 5 || len(got.Preload) != 0 {
			t.Fatalf("cleared %+v", got)
		}
	})
	t.Run("stale version conflicts", func(t *testing.T) {
		alice.must(409, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 1, "name": "lost update"}, nil)
		var got agentJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/agents/%d", a.ID), nil, &got)
		if got.Name != "Analyst 2" {
			t.Fatalf("a stale update was applied: %+v", got)
		}
	})
	child := alice.createAgent(map[string]any{"name": "Child"})
	t.Run("children", func(t *testing.T) {
		var got agentJSON
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 5, "children": []int64{child.ID}}, &got)
		if len(got.Children) != 1 || got.Children[0] != child.ID {
			t.Fatalf("children %+v", got.Children)
		}
	})

	t.Run("children with one name are refused", func(t *testing.T) {
		twin := alice.createAgent(map[string]any{"name": "Child"})
		alice.must(400, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 6, "children": []int64{child.ID, twin.ID}}, nil)
		other := alice.createAgent(map[string]any{"name": "Other"})
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 6, "children": []int64{child.ID, other.ID}}, nil)
		alice.must(409, "PUT", fmt.Sprintf("/api/v1/agents/%d", other.ID), map[string]any{"version": 1, "name": "Child"}, nil)
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 7, "children": []int64{child.ID}}, nil)
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/agents/%d", twin.ID), nil, nil)
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/agents/%d", other.ID), nil, nil)
	})

	bad := []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"missing name", "POST", "/api/v1/agents", map[string]any{"model": "x"}, 400},
		{"blank name", "POST", "/api/v1/agents", map[string]any{"name": "  "}, 400},
		{"unknown tool", "POST", "/api/v1/agents", map[string]any{"name": "x", "internal_tools": map[string]bool{"rm_rf": true}}, 400},
		{"unknown field", "POST", "/api/v1/agents", map[string]any{"name": "x", "colour": "red"}, 400},
		{"malformed json", "POST", "/api/v1/agents", `{"name": `, 400},
		{"wrong type", "POST", "/api/v1/agents", `{"name": 7}`, 400},
		{"no body", "POST", "/api/v1/agents", nil, 400},
		{"update without version", "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"name": "x"}, 400},
		{"own child", "PUT", fmt.Sprintf("/api/v1/agents/%d", a.ID), map[string]any{"version": 8, "children": []int64{a.ID}}, 400},
		{"cycle", "PUT", fmt.Sprintf("/api/v1/agents/%d", child.ID), map[string]any{"version": 1, "children": []int64{a.ID}}, 400},
		{"child that does not exist", "PUT", fmt.Sprintf("/api/v1/agents/%d", child.ID), map[string]any{"version": 1, "children": []int64{999999}}, 400},
		{"non-numeric id", "GET", "/api/v1/agents/abc", nil, 404},
		{"unknown agent", "GET", "/api/v1/agents/999999", nil, 404},
		{"conversation with unknown agent", "POST", "/api/v1/conversations", map[string]any{"agent_id": 999999}, 404},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			alice.must(tc.want, tc.method, tc.path, tc.body, nil)
		})
	}

	t.Run("list and delete", func(t *testing.T) {
		var list []agentJSON
		alice.must(200, "GET", "/api/v1/agents", nil, &list)
		if len(list) != 2 {
			t.Fatalf("listed %d agents, want 2", len(list))
		}
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/agents/%d", child.ID), nil, nil)
		alice.must(404, "GET", fmt.Sprintf("/api/v1/agents/%d", child.ID), nil, nil)
		var parent agentJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/agents/%d", a.ID), nil, &parent)
		if len(parent.Children) != 0 {
			t.Fatalf("deleted child still listed: %+v", parent.Children)
		}
	})
}

// TestPermissions runs every role against reads and writes of agents and conversations.
func TestPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	owner, _ := m.user(t, "owner", false)
	editor, editorID := m.user(t, "editor", false)
	viewer, viewerID := m.user(t, "viewer", false)
	stranger, _ := m.user(t, "stranger", false)

	agent := owner.createAgent(map[string]any{"name": "Shared", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := owner.createConversation(agent.ID)
	for _, res := range []string{fmt.Sprintf("/api/v1/agents/%d", agent.ID), fmt.Sprintf("/api/v1/conversations/%d", conv)} {
		owner.must(200, "POST", res+"/members", map[string]any{"user_id": editorID, "role": "editor"}, nil)
		owner.must(200, "POST", res+"/members", map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	}

	users := []struct {
		name                    string
		c                       *client
		read, write, manageRole int
	}{
		{"owner", owner, 200, 200, 200},
		{"editor", editor, 200, 200, 403},
		{"viewer", viewer, 200, 403, 403},
		{"stranger", stranger, 404, 404, 404},
	}
	version := agent.Version
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			toolsPath := fmt.Sprintf("/api/v1/conversations/%d/internal-tools", conv)
			u.c.must(u.read, "GET", toolsPath, nil, nil)
			u.c.must(u.write, "PUT", toolsPath+"/pyodide_sandbox", map[string]any{"enabled": false}, nil)
			u.c.must(u.read, "GET", fmt.Sprintf("/api/v1/conversations/%d", conv), nil, nil)
			u.c.must(u.read, "GET", fmt.Sprintf("/api/v1/agents/%d", agent.ID), nil, nil)
			u.c.must(u.read, "GET", fmt.Sprintf("/api/v1/conversations/%d/members", conv), nil, nil)
			u.c.must(u.write, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", conv), map[string]any{"title": "renamed by " + u.name}, nil)
			var got agentJSON
			status := u.c.do("PUT", fmt.Sprintf("/api/v1/agents/%d", agent.ID), map[string]any{"version": version, "description": u.name}, &got)
			if status != u.write {
				t.Fatalf("update agent: %d, want %d", status, u.write)
			}
			if status == 200 {
				version = got.Version
			}
			u.c.must(u.manageRole, "POST", fmt.Sprintf("/api/v1/agents/%d/members", agent.ID), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
			// A viewer can start its own conversation with an agent it can see.
			if u.read == 200 {
				u.c.createConversation(agent.ID)
			} else {
				u.c.must(404, "POST", "/api/v1/conversations", map[string]any{"agent_id": agent.ID}, nil)
			}
		})
	}
	t.Run("only the owner deletes", func(t *testing.T) {
		editor.must(403, "DELETE", fmt.Sprintf("/api/v1/conversations/%d", conv), nil, nil)
		stranger.must(404, "DELETE", fmt.Sprintf("/api/v1/conversations/%d", conv), nil, nil)
		editor.must(403, "DELETE", fmt.Sprintf("/api/v1/agents/%d", agent.ID), nil, nil)
	})
	t.Run("shared conversations are listed", func(t *testing.T) {
		var list []struct{ ID int64 }
		viewer.must(200, "GET", "/api/v1/conversations", nil, &list)
		found := false
		for _, c := range list {
			found = found || c.ID == conv
		}
		if !found {
			t.Fatalf("viewer's list %+v lacks shared conversation %d", list, conv)
		}
		stranger.must(200, "GET", "/api/v1/conversations", nil, &list)
		for _, c := range list {
			if c.ID == conv {
				t.Fatal("stranger sees the conversation")
			}
		}
	})
	t.Run("rename", func(t *testing.T) {
		var got struct{ Title string }
		owner.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", conv), map[string]any{"title": "  Budget 2027 "}, &got)
		if got.Title != "Budget 2027" {
			t.Fatalf("title %q", got.Title)
		}
		owner.must(400, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", conv), map[string]any{"title": " "}, nil)
		owner.must(400, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", conv), map[string]any{"name": "x"}, nil)
	})
	t.Run("bad member input", func(t *testing.T) {
		path := fmt.Sprintf("/api/v1/conversations/%d/members", conv)
		owner.must(400, "POST", path, map[string]any{"user_id": viewerID, "role": "owner"}, nil)
		owner.must(400, "POST", path, map[string]any{"user_id": 999999, "role": "viewer"}, nil)
		owner.must(204, "DELETE", fmt.Sprintf("%s/%d", path, viewerID), nil, nil)
		viewer.must(404, "GET", fmt.Sprintf("/api/v1/conversations/%d", conv), nil, nil)
		owner.must(404, "DELETE", fmt.Sprintf("%s/%d", path, viewerID), nil, nil)
	})
}

func TestToggles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	on := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	off := alice.createAgent(map[string]any{"name": "Writer", "internal_tools": map[string]bool{"pyodide_sandbox": false}})
	withOn, withOff, noAgent := alice.createConversation(on.ID), alice.createConversation(off.ID), alice.createConversation(0)
	path := func(conv int64) string {
		return fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv)
	}

	steps := []struct {
		name    string
		conv    int64
		put     any // nil: only read
		enabled bool
		source  string
	}{
		{"agent with sandbox on", withOn, nil, true, "agent"},
		{"agent with sandbox off", withOff, nil, false, "agent"},
		{"no agent falls to the default", noAgent, nil, false, "default"},
		{"switch off overrides the agent", withOn, map[string]any{"enabled": false}, false, "conversation"},
		{"switch on overrides the agent", withOff, map[string]any{"enabled": true}, true, "conversation"},
		{"null inherits again", withOn, map[string]any{"enabled": nil}, true, "agent"},
		{"override without an agent", noAgent, map[string]any{"enabled": true}, true, "conversation"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.put != nil {
				var st toolState
				alice.must(200, "PUT", path(s.conv), s.put, &st)
				if st.Enabled != s.enabled || st.Source != s.source {
					t.Fatalf("PUT answered %+v, want enabled=%v source=%s", st, s.enabled, s.source)
				}
			}
			st := alice.tool(s.conv, "pyodide_sandbox")
			if st.Enabled != s.enabled || st.Source != s.source {
				t.Fatalf("GET says %+v, want enabled=%v source=%s", st, s.enabled, s.source)
			}
		})
	}
	t.Run("the agent's change reaches inheriting conversations", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", on.ID), map[string]any{"version": on.Version, "internal_tools": map[string]bool{"pyodide_sandbox": false}}, nil)
		if st := alice.tool(withOn, "pyodide_sandbox"); st.Enabled || st.Source != "agent" {
			t.Fatalf("%+v", st)
		}
	})
	t.Run("without Deno the sandbox is off by policy and says how to fix it", func(t *testing.T) {
		m2 := e.node(func(c *Config, _ *Main) {
			c.Sandbox.Enabled = true
			c.Sandbox.Engine = sandbox.DefaultConfig()
			c.Sandbox.Engine.RuntimeDir, c.Sandbox.Engine.DenoPath = t.TempDir(), "/nonexistent/deno"
		})
		a := m2.as(t, alice.token)
		var st toolState
		if _, ok := poll(10*time.Second, func() bool {
			st = a.tool(withOn, "pyodide_sandbox")
			return st.Source == "policy" && !st.Enabled && !st.Available
		}); !ok {
			t.Fatalf("%+v", st)
		}
		var tools []struct {
			ID                string
			UnavailableReason string `json:"unavailable_reason"`
		}
		a.must(200, "GET", "/api/v1/internal-tools", nil, &tools)
		if tools[0].ID != "pyodide_sandbox" || !strings.Contains(tools[0].UnavailableReason, "npm ci") {
			t.Fatalf("%+v", tools)
		}
		a.must(503, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", withOn), map[string]any{"code": "1"}, nil)
		var ready struct{ Ready bool }
		a.must(200, "GET", "/readyz", nil, &ready)
		if !ready.Ready {
			t.Fatal("a node without the sandbox must still be ready for everything else")
		}
	})
	bad := []struct {
		name, path string
		body       any
		want       int
	}{
		{"unknown tool", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/rm_rf", withOn), map[string]any{"enabled": true}, 404},
		{"unknown conversation", "/api/v1/conversations/999999/internal-tools/pyodide_sandbox", map[string]any{"enabled": true}, 404},
		{"missing enabled", path(withOn), map[string]any{}, 400},
		{"enabled not a bool", path(withOn), map[string]any{"enabled": "yes"}, 400},
		{"malformed", path(withOn), `{"enabled": tru`, 400},
		{"extra field", path(withOn), map[string]any{"enabled": true, "force": true}, 400},
		{"no body", path(withOn), nil, 400},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			alice.must(tc.want, "PUT", tc.path, tc.body, nil)
		})
	}

	t.Run("policy switch-off wins over every setting", func(t *testing.T) {
		m2 := e.node(func(c *Config, _ *Main) { c.ToolsDisabled = []string{"pyodide_sandbox"} })
		st := m2.as(t, alice.token).tool(withOff, "pyodide_sandbox")
		if st.Enabled || st.Source != "policy" || st.Available {
			t.Fatalf("%+v", st)
		}
	})
}

func TestWebSocketToasts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nodeA, nodeB := e.node(), e.node()
	alice, _ := nodeA.user(t, "alice", false)
	bob, bobID := nodeA.user(t, "bob", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)

	// Alice has a tab on each node; Bob watches the conversation from node B.
	tabA := alice.socket()
	tabB := nodeB.as(t, alice.token).socket()
	bobTab := nodeB.as(t, bob.token).socket()
	bobTab.subscribe(conv, nil)

	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)

	for name, tab := range map[string]*socket{"same node": tabA, "other node": tabB} {
		t.Run("toast on "+name, func(t *testing.T) {
			f := tab.expect("toast")
			var d struct {
				Level, Message    string
				ConversationID    int64  `json:"conversation_id"`
				ConversationTitle string `json:"conversation_title"`
				Tool, Source      string
				Enabled           *bool
			}
			_ = json.Unmarshal(f.Data, &d)
			if d.Level != "success" || d.Message != "Internal tools configuration updated" || d.ConversationID != conv || d.ConversationTitle != "test" ||
				d.Tool != "pyodide_sandbox" || d.Enabled == nil || *d.Enabled || d.Source != "conversation" {
				t.Fatalf("toast %s", f.Data)
			}
		})
	}
	t.Run("subscriber gets internal_tools.updated across nodes", func(t *testing.T) {
		f := bobTab.expect("internal_tools.updated")
		var d struct {
			ToolID string `json:"tool_id"`
			Tools  []toolState
		}
		_ = json.Unmarshal(f.Data, &d)
		if f.ConversationID != conv || f.Seq != 1 || d.ToolID != "pyodide_sandbox" || len(d.Tools) == 0 || d.Tools[0].Enabled {
			t.Fatalf("frame %+v data %s", f, f.Data)
		}
	})
	t.Run("other users get no toast", func(t *testing.T) {
		bobTab.quiet("toast", 300*time.Millisecond)
	})
	t.Run("a stranger cannot subscribe", func(t *testing.T) {
		carol, _ := nodeA.user(t, "carol", false)
		s := carol.socket()
		s.send(map[string]any{"type": "subscribe", "conversation_id": conv})
		f := s.expect("error")
		if f.ConversationID != conv || !strings.Contains(string(f.Data), "not_found") {
			t.Fatalf("error frame %+v %s", f, f.Data)
		}
	})
	t.Run("bad frames are answered, not fatal", func(t *testing.T) {
		tabA.send("not an object")
		tabA.expect("error")
		tabA.send(map[string]any{"type": "dance"})
		tabA.expect("error")
		tabA.send(map[string]any{"type": "ping"})
		tabA.expect("pong")
	})
	t.Run("an agent's tools changed reach the user's sockets on every node", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", agent.ID), map[string]any{"version": agent.Version, "internal_tools": map[string]bool{"pyodide_sandbox": false}}, nil)
		for name, tab := range map[string]*socket{"same node": tabA, "other node": tabB} {
			f := tab.expect("internal_tools.updated")
			var d struct {
				AgentID       int64           `json:"agent_id"`
				InternalTools map[string]bool `json:"internal_tools"`
			}
			_ = json.Unmarshal(f.Data, &d)
			if f.ConversationID != 0 || d.AgentID != agent.ID || d.InternalTools["pyodide_sandbox"] {
				t.Errorf("%s: frame %+v data %s", name, f, f.Data)
			}
		}
	})
}

func TestWebSocketResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	toggle := func(on bool) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": on}, nil)
	}
	s := alice.socket()
	s.subscribe(conv, nil)
	for i := range 3 {
		toggle(i%2 == 0)
		if f := s.expect("internal_tools.updated"); f.Seq != int64(i+1) {
			t.Fatalf("live seq %d, want %d", f.Seq, i+1)
		}
	}
	s.conn.Close()
	toggle(true) // seq 4, 5 while away
	toggle(false)

	s2 := alice.socket()
	if f := s2.subscribe(conv, ptr(int64(3))); string(f.Data) != `{"recovered":true}` {
		t.Fatalf("subscribed %s", f.Data)
	}
	toggle(true) // seq 6, live
	for want := int64(4); want <= 6; want++ {
		if f := s2.expect("internal_tools.updated"); f.Seq != want {
			t.Fatalf("seq %d, want %d", f.Seq, want)
		}
	}
	s2.quiet("internal_tools.updated", 300*time.Millisecond) // exactly once

	t.Run("pruned history is not recovered", func(t *testing.T) {
		if _, err := m.DB.Exec(context.Background(), `update conversation_events set created_at = now() - interval '2 days'`); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Store.Prune(context.Background()); err != nil {
			t.Fatal(err)
		}
		s3 := alice.socket()
		if f := s3.subscribe(conv, ptr(int64(2))); string(f.Data) != `{"recovered":false}` {
			t.Fatalf("subscribed %s", f.Data)
		}
		toggle(false) // seq 7 still arrives live
		if f := s3.expect("internal_tools.updated"); f.Seq != 7 {
			t.Fatalf("seq %d, want 7", f.Seq)
		}
	})
}

// TestSlowClient floods two sockets of one user; the one that never reads is cut off,
// the other receives everything.
func TestSlowClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node(func(c *Config, _ *Main) { c.WSQueueBytes = 256 << 10 })
	alice, aliceID := m.user(t, "alice", false)
	slow := alice.socket()
	fast := alice.socket()

	// The publisher stays at most two frames ahead of the fast reader, so only a client
	// that stops reading can fall behind by more than the queue.
	const n, size = 400, 64 << 10
	received := make(chan int, n)
	go func() {
		defer close(received)
		count := 0
		for count < n {
			f, err := fast.next(20 * time.Second)
			if err != nil {
				return
			}
			if f.Type == "flood" {
				count++
				received <- count
			}
		}
	}()
	body := strings.Repeat("x", size)
	count := 0
	for i := range n {
		for count < i-2 {
			c, ok := <-received
			if !ok {
				t.Fatalf("fast client stopped after %d of %d", count, n)
			}
			count = c
		}
		payload, _ := json.Marshal(map[string]any{"type": "flood", "data": map[string]any{"i": i, "pad": body}})
		if err := m.Redis.Publish(context.Background(), e.redisPrefix+fmt.Sprintf("events:user:%d", aliceID), payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for c := range received {
		count = c
	}
	if count != n {
		t.Fatalf("fast client got %d of %d", count, n)
	}
	// The slow socket is closed: with "try again later" once its buffered frames are read
	// when the server's stuck write ended between frames, or abruptly when its write
	// deadline cut a frame in half (TCP cannot deliver the close frame after half a
	// frame) or the server reset what the client never read. Either way it ends, and
	// does not linger open.
	_ = slow.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, _, err := slow.conn.ReadMessage()
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the slow socket was never closed: %v", err)
		}
		if !closedAsSlow(err) {
			t.Fatalf("slow client ended with %v, want close 1013, an abrupt close or a reset", err)
		}
		break
	}
}

// TestStalledSocket is a client whose application stops reading while the server has
// more for it than the queue bound. Its small receive buffer fills at once; what the
// server writes after that piles up in the server's own kernel buffer, which Linux grows
// to megabytes, so a writer that never blocks must still see that the client fell
// behind. Silent or sending the protocol's pings, the socket is closed within seconds,
// counted, and torn down: reading at last, the client finds the connection gone.
func TestStalledSocket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ping bool
	}{{"silent", false}, {"pinging", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m := e.node(func(c *Config, _ *Main) { c.WSQueueBytes = 64 << 10 })
			alice, aliceID := m.user(t, "alice", false)
			conn := alice.stalledSocket(4 << 10)
			if tc.ping {
				every(t, 100*time.Millisecond, func() error { return conn.WriteJSON(map[string]any{"type": "ping"}) })
			}
			eventually(t, 5*time.Second, "socket registered", func() bool { return m.Hub.Clients() == 1 })

			// 2 MB in small frames, paced so the server's writer keeps up with them.
			pad := strings.Repeat("x", 1000)
			start := time.Now()
			for i := range 2000 {
				payload, _ := json.Marshal(map[string]any{"type": "toast", "data": map[string]any{"i": i, "pad": pad}})
				if err := m.Redis.Publish(context.Background(), e.redisPrefix+fmt.Sprintf("events:user:%d", aliceID), payload).Err(); err != nil {
					t.Fatal(err)
				}
				if i%20 == 19 {
					time.Sleep(10 * time.Millisecond)
				}
			}
			took := eventually(t, 5*time.Second, "the stalled socket closed", func() bool { return m.Hub.Clients() == 0 })
			t.Logf("closed %s after the first frame was published, %s after the last", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
			if n := counterValue(t, m, "sandchat_ws_slow_disconnects_total"); n != 1 {
				t.Fatalf("sandchat_ws_slow_disconnects_total %v, want 1", n)
			}
			// Let go for real once the linger (5 s) is over: the server's kernel holds
			// neither the socket nor the megabytes the client never read, so the
			// client's end is reset.
			eventually(t, 10*time.Second, "the server resets the connection", func() bool { return tcpState(t, conn.NetConn()) == tcpClose })
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				_, _, err := conn.ReadMessage()
				if err == nil {
					continue
				}
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the server still holds the connection: %v", err)
				}
				if !closedAsSlow(err) {
					t.Fatalf("stalled client ended with %v, want close 1013, an abrupt close or a reset", err)
				}
				t.Logf("the stalled client saw: %v", err)
				break
			}
		})
	}
}

// closedAsSlow tells how a client that fell behind may see its socket end: 1013 when it
// read its way to the close frame, else an abrupt close or a reset (the server drops
// what the client did not read in time).
func closedAsSlow(err error) bool {
	return websocket.IsCloseError(err, websocket.CloseTryAgainLater, websocket.CloseAbnormalClosure) || errors.Is(err, syscall.ECONNRESET)
}

// stalledSocket dials with a receive buffer of rcvbuf bytes and never reads unless the
// test does.
func (c *client) stalledSocket(rcvbuf int) *websocket.Conn {
	c.t.Helper()
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: testenv.ReceiveBuffer(rcvbuf)}).DialContext}
	conn, _, err := d.Dial(strings.Replace(c.base, "http://", "ws://", 1)+"/api/v1/ws", http.Header{"Authorization": {"Bearer " + c.token}})
	if err != nil {
		c.t.Fatalf("dial: %v", err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// tcpClose is Linux's TCP_CLOSE: a connection that is gone, here because it was reset.
const tcpClose = 7

// tcpState is the state of a TCP connection as the kernel sees it.
func tcpState(t *testing.T, conn net.Conn) uint8 {
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

// counterValue reads a counter from the node's metrics registry.
func counterValue(t *testing.T, m *Main, name string) float64 {
	t.Helper()
	families, err := m.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	anon := m.as(t, "")
	anon.must(200, "GET", "/healthz", nil, nil)
	var ready struct {
		Ready  bool
		Checks map[string]string
	}
	anon.must(200, "GET", "/readyz", nil, &ready)
	if !ready.Ready || ready.Checks["postgres"] != "ok" || ready.Checks["redis"] != "ok" {
		t.Fatalf("%+v", ready)
	}
	resp, err := http.Get("http://" + m.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), "sandchat_http_requests_total") || !strings.Contains(string(raw), "sandchat_ws_clients") {
		t.Fatalf("metrics lack sandchat series:\n%.500s", raw)
	}

	t.Run("readyz names the failing part", func(t *testing.T) {
		m.Redis.Close()
		anon.must(503, "GET", "/readyz", nil, &ready)
		if ready.Ready || ready.Checks["redis"] == "ok" || ready.Checks["postgres"] != "ok" {
			t.Fatalf("%+v", ready)
		}
	})
}

func TestShutdownAsksClientsToReconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	s := alice.socket()
	done := make(chan error, 1)
	go func() {
		_, _, err := s.conn.ReadMessage()
		done <- err
	}()
	eventually(t, 5*time.Second, "the socket registered", func() bool { return m.Hub.Clients() == 1 })
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !websocket.IsCloseError(err, websocket.CloseServiceRestart) {
		t.Fatalf("socket ended with %v, want close 1012", err)
	}
}
