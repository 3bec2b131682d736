package main

import (
	"fmt"
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
