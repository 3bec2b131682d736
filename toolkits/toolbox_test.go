package toolkits_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// swarmTurn records what the toolbox asks of the turn loop.
type swarmTurn struct {
	delegated []string
	vetoed    bool
}

func (s *swarmTurn) Emit(context.Context, string, map[string]any) error { return nil }
func (s *swarmTurn) Stream(context.Context, string, map[string]any) toolkits.Stream {
	return nil
}
func (s *swarmTurn) Vetoed(context.Context, string) bool { return s.vetoed }
func (s *swarmTurn) Delegate(_ context.Context, child, task string) (string, string) {
	s.delegated = append(s.delegated, child+": "+task)
	return "completed", "done by " + child
}

func TestToolbox(t *testing.T) {
	t.Parallel()
	limits := func() sandbox.StatusLimits { return sandbox.StatusLimits{TimeoutMS: 30000, MemoryBytes: 512 << 20} }
	tools := toolkits.NewTools(&toolkits.Sandbox{}, limits, " (no other packages are installed)")
	kids := []toolkits.Child{{Name: "alpha", Description: "does a"}, {Name: "beta", Description: "does b"}}
	caller := toolkits.Caller{ConversationID: 1, TurnID: 2, AgentName: "root"}
	call := func(name, args string) toolkits.ToolCall {
		return toolkits.ToolCall{ID: "c1", Name: name, Arguments: json.RawMessage(args)}
	}
	result := func(t *testing.T, raw string) toolkits.ToolResult {
		t.Helper()
		var r toolkits.ToolResult
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatalf("result %q: %v", raw, err)
		}
		return r
	}
	names := func(specs []toolkits.ToolSpec) string {
		var n []string
		for _, s := range specs {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}

	t.Run("offers exactly what is on", func(t *testing.T) {
		turn := &swarmTurn{}
		for _, tc := range []struct {
			enabled map[string]bool
			swarm   bool
			want    string
		}{
			{map[string]bool{toolkits.PyodideSandbox: true}, true, "pyodide_sandbox,delegate"},
			{map[string]bool{toolkits.PyodideSandbox: true}, false, "pyodide_sandbox"},
			{map[string]bool{}, true, "delegate"},
			{map[string]bool{}, false, ""},
		} {
			var sw toolkits.Swarm
			if tc.swarm {
				sw = turn
			}
			if got := names(tools.Toolbox(caller, tc.enabled, turn, kids, sw).Specs(context.Background())); got != tc.want {
				t.Errorf("enabled %v swarm %v: specs %q, want %q", tc.enabled, tc.swarm, got, tc.want)
			}
		}
		if got := names(tools.Toolbox(caller, nil, turn, nil, turn).Specs(context.Background())); got != "" {
			t.Errorf("swarm without children offered %q", got)
		}
	})

	t.Run("refuses what is off or malformed", func(t *testing.T) {
		turn := &swarmTurn{}
		off := tools.Toolbox(caller, map[string]bool{}, turn, nil, nil)
		for _, c := range []toolkits.ToolCall{call(toolkits.PyodideSandbox, `{"code":"1"}`), call(toolkits.DelegateTool, `{"agent":"alpha","task":"x"}`), call("rm_rf", `{}`)} {
			r := result(t, off.Call(context.Background(), c))
			if r.Status != "refused" || !strings.Contains(r.Message, "not available to root") {
				t.Errorf("%s: %+v", c.Name, r)
			}
		}
		on := tools.Toolbox(caller, map[string]bool{toolkits.PyodideSandbox: true}, turn, kids, turn)
		for _, tc := range []struct {
			call toolkits.ToolCall
			want string
		}{
			{call(toolkits.PyodideSandbox, `{"code":"  "}`), `Arguments must be {"code"`},
			{call(toolkits.PyodideSandbox, `[1]`), `Arguments must be {"code"`},
			{call(toolkits.DelegateTool, `{"agent":"gamma","task":"x"}`), `No child agent called "gamma"`},
			{call(toolkits.DelegateTool, `"x"`), `Arguments must be {"agent"`},
		} {
			if r := result(t, on.Call(context.Background(), tc.call)); r.Status != "refused" || !strings.Contains(r.Message, tc.want) {
				t.Errorf("%s %s: %+v, want %q", tc.call.Name, tc.call.Arguments, r, tc.want)
			}
		}
		turn.vetoed = true
		if r := result(t, on.Call(context.Background(), call(toolkits.PyodideSandbox, `{"code":"1"}`))); r.Status != "refused" || !strings.Contains(r.Message, "switched the Python sandbox off") {
			t.Errorf("vetoed run: %+v", r)
		}
		if len(turn.delegated) != 0 {
			t.Errorf("refused calls reached the swarm: %v", turn.delegated)
		}
	})

	t.Run("delegates to a child", func(t *testing.T) {
		turn := &swarmTurn{}
		box := tools.Toolbox(caller, nil, turn, kids, turn)
		r := result(t, box.Call(context.Background(), call(toolkits.DelegateTool, `{"agent":"beta","task":"sum it"}`)))
		if r.Status != "completed" || r.Agent != "beta" || r.Answer != "done by beta" || strings.Join(turn.delegated, ";") != "beta: sum it" {
			t.Errorf("delegation: %+v, swarm saw %v", r, turn.delegated)
		}
	})
}
