package agents

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/toolkits"
)

// TestBuiltinClaimsOnlyItsTools: asked what it can do, the offline model speaks of
// running Python only when it was given the tool, and otherwise says where it is
// switched on.
func TestBuiltinClaimsOnlyItsTools(t *testing.T) {
	t.Parallel()
	ask := func(tools []ToolSpec, off map[string]string) string {
		t.Helper()
		got, err := Builtin{}.Complete(context.Background(), CompletionRequest{
			Messages: []ChatMessage{{Role: RoleUser, Content: "what can you do?"}}, Tools: tools, Off: off}, nil)
		if err != nil || len(got.ToolCalls) > 0 {
			t.Fatalf("%+v, %v", got, err)
		}
		return got.Content
	}
	why := "it is off for this conversation; switch it on in the chat toolbar (Internal tools → Python sandbox)"
	off := ask(nil, map[string]string{toolkits.PyodideSandbox: why})
	if strings.Contains(off, "I will run") || !strings.Contains(off, "cannot run code") || !strings.Contains(off, why) {
		t.Fatalf("with the sandbox off it says %q", off)
	}
	on := ask([]ToolSpec{{Name: toolkits.PyodideSandbox}}, nil)
	if !strings.Contains(on, "I will run it in this conversation's sandbox") || strings.Contains(on, "cannot") {
		t.Fatalf("with the sandbox on it says %q", on)
	}
	kids := ask([]ToolSpec{{Name: DelegateTool, Parameters: json.RawMessage(`{"properties":{"agent":{"enum":["alpha"]}}}`)}}, map[string]string{toolkits.PyodideSandbox: why})
	if !strings.Contains(kids, "@name") || !strings.Contains(kids, "alpha") || !strings.Contains(kids, "cannot run code") {
		t.Fatalf("with delegation alone it says %q", kids)
	}
}

// TestSystemPromptSaysWhatIsOff: a model without a tool is told so after the agent's own
// prompt, which may have been written for the tool being on; with every tool on the
// prompt is the agent's alone.
func TestSystemPromptSaysWhatIsOff(t *testing.T) {
	t.Parallel()
	own := "You are a data analyst; run Python for every question."
	got := systemPrompt(own, map[string]string{toolkits.PyodideSandbox: "it is off for this conversation"})
	if !strings.HasPrefix(got, own+"\n\n") || !strings.Contains(got, "- Python sandbox: it is off for this conversation.") || !strings.Contains(got, "never say or imply that you can") {
		t.Fatalf("system prompt %q", got)
	}
	if got := systemPrompt(own, nil); got != own {
		t.Fatalf("with every tool on: %q", got)
	}
	if got := systemPrompt("", nil); got != "" {
		t.Fatalf("no prompt and every tool on: %q", got)
	}
}

// TestModelContextOfARetry: a turn that answers the latest message again replaces the
// answer before it, for itself and for every later turn.
func TestModelContextOfARetry(t *testing.T) {
	t.Parallel()
	turn := func(id int64) *int64 { return &id }
	call, _ := json.Marshal([]ToolCall{{ID: "c", Name: "pyodide_sandbox", Arguments: json.RawMessage(`{"code":"1"}`)}})
	history := []conversations.Message{
		{TurnID: turn(1), Role: RoleUser, Content: "```python\n1\n```"},
		{TurnID: turn(1), Role: RoleAssistant, Content: "The Python sandbox is off here"},
		{TurnID: turn(2), Role: RoleAssistant, ToolCalls: call},
		{TurnID: turn(2), Role: RoleTool, ToolCallID: "c", Content: "result 1"},
		{TurnID: turn(2), Role: RoleAssistant, Content: "1"},
		{TurnID: turn(3), Role: RoleUser, Content: "thanks"},
	}
	roles := func(msgs []ChatMessage) string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.Role+":"+m.Content)
		}
		return strings.Join(out, " ")
	}
	if got, want := roles(modelContext(history)), "user:```python\n1\n``` assistant: tool:result 1 assistant:1 user:thanks"; got != want {
		t.Fatalf("later turn sees\n%s\nwant\n%s", got, want)
	}
	// The retry itself, before it wrote anything: the message it answers, last.
	if got, want := roles(untilLastUser(modelContext(history[:2]))), "user:```python\n1\n```"; got != want {
		t.Fatalf("the retry sees %q, want %q", got, want)
	}
}
