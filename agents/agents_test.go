package agents

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/conversations"
)

func TestBuiltin(t *testing.T) {
	t.Parallel()
	sandboxTool := ToolSpec{Name: "pyodide_sandbox"}
	delegate := ToolSpec{Name: DelegateTool, Parameters: json.RawMessage(`{"properties":{"agent":{"enum":["alpha","beta"]}}}`)}
	cases := []struct {
		name      string
		msgs      []ChatMessage
		tools     []ToolSpec
		calls     []string // tool names, in order
		arg       string   // a substring of the first call's arguments
		inContent string
		off       map[string]string
	}{
		{"two blocks, two calls", []ChatMessage{{Role: RoleUser, Content: "a\n```python\nx = 1\n```\nb\n```py\nprint(x)\n```"}},
			[]ToolSpec{sandboxTool}, []string{"pyodide_sandbox", "pyodide_sandbox"}, `x = 1`, "", nil},
		{"sandbox off", []ChatMessage{{Role: RoleUser, Content: "```python\n1\n```"}}, nil, nil, "", "sandbox is off", nil},
		{"sandbox off says which setting", []ChatMessage{{Role: RoleUser, Content: "```python\n1\n```"}}, nil, nil, "",
			"sandbox is off here, so I cannot run this code: the agent kid's own setting for it is off.", map[string]string{"pyodide_sandbox": "the agent kid's own setting for it is off"}},
		{"no code", []ChatMessage{{Role: RoleUser, Content: "hello"}}, []ToolSpec{sandboxTool}, nil, "", "built-in offline assistant", nil},
		{"delegation", []ChatMessage{{Role: RoleUser, Content: "@beta do the thing"}}, []ToolSpec{delegate}, []string{DelegateTool}, `"task":"do the thing"`, "", nil},
		{"unknown child", []ChatMessage{{Role: RoleUser, Content: "@gamma hi"}}, []ToolSpec{delegate}, nil, "", "alpha, beta", nil},
		{"swarm off", []ChatMessage{{Role: RoleUser, Content: "@beta hi"}}, nil, nil, "", "Swarm mode is off", nil},
		{"results summarized", []ChatMessage{
			{Role: RoleUser, Content: "..."},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "1"}, {ID: "2"}}},
			{Role: RoleTool, ToolCallID: "1", Content: `{"status":"success","stdout":"hi\n","result":"42","artifacts":["a.png"]}`},
			{Role: RoleTool, ToolCallID: "2", Content: `{"status":"error","error":{"type":"NameError","message":"name 'y' is not defined"}}`},
		}, nil, nil, "", "hi\n42\n```\nFiles: a.png\n\n```\nNameError: name 'y' is not defined", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var streamed strings.Builder
			got, err := Builtin{}.Complete(context.Background(), CompletionRequest{Messages: tc.msgs, Tools: tc.tools, Off: tc.off}, func(s string) { streamed.WriteString(s) })
			if err != nil {
				t.Fatal(err)
			}
			if len(got.ToolCalls) != len(tc.calls) {
				t.Fatalf("calls %+v, want %v", got.ToolCalls, tc.calls)
			}
			for i, c := range got.ToolCalls {
				if c.Name != tc.calls[i] || c.ID == "" {
					t.Fatalf("call %d: %+v", i, c)
				}
			}
			if tc.arg != "" && !strings.Contains(string(got.ToolCalls[0].Arguments), tc.arg) {
				t.Fatalf("arguments %s lack %q", got.ToolCalls[0].Arguments, tc.arg)
			}
			if !strings.Contains(got.Content, tc.inContent) {
				t.Fatalf("content %q lacks %q", got.Content, tc.inContent)
			}
			if streamed.String() != got.Content {
				t.Fatalf("streamed %q, answered %q", streamed.String(), got.Content)
			}
		})
	}
}

// TestModelContext: a call cut off by a crash, and the inner steps of a child, never
// reach the model; answered calls keep their results.
func TestModelContext(t *testing.T) {
	t.Parallel()
	calls := func(ids ...string) json.RawMessage {
		var cs []ToolCall
		for _, id := range ids {
			cs = append(cs, ToolCall{ID: id, Name: "pyodide_sandbox", Arguments: json.RawMessage(`{}`)})
		}
		raw, _ := json.Marshal(cs)
		return raw
	}
	history := []conversations.Message{
		{Role: RoleUser, Content: "one"},
		{Role: RoleAssistant, AgentPath: []string{"lead"}, ToolCalls: calls("a")},
		{Role: RoleAssistant, AgentPath: []string{"lead", "child"}, Content: "inner step"},
		{Role: RoleTool, AgentPath: []string{"lead"}, ToolCallID: "a", Content: "result a"},
		{Role: RoleAssistant, AgentPath: []string{"lead"}, Content: "done"},
		{Role: RoleUser, Content: "two"},
		{Role: RoleAssistant, AgentPath: []string{"lead"}, ToolCalls: calls("b")}, // the node died here
		{Role: RoleUser, Content: "three"},
	}
	got := modelContext(history)
	var roles []string
	for _, m := range got {
		roles = append(roles, m.Role+":"+m.Content)
	}
	want := "user:one assistant: tool:result a assistant:done user:two user:three"
	if strings.Join(roles, " ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(roles, " "), want)
	}
	if len(got[1].ToolCalls) != 1 || got[2].ToolCallID != "a" {
		t.Fatalf("the answered call lost its pairing: %+v", got[1:3])
	}
}
