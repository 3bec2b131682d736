package agents

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
