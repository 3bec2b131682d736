package agents

import (
	"context"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/toolkits"
)

// Roles of the messages a provider sees.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ChatMessage is one message of the context handed to a model.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Name is the agent that wrote an assistant message, for swarm context.
	Name string `json:"name,omitempty"`
}

// ToolCall and ToolSpec are the tools' own types: the model asks for and is offered
// what toolkits runs.
type (
	ToolCall = toolkits.ToolCall
	ToolSpec = toolkits.ToolSpec
)

// CompletionRequest is one step of a turn: the context so far and the tools on offer.
type CompletionRequest struct {
	Model    string
	Messages []ChatMessage // the system prompt, when any, is the first message
	Tools    []ToolSpec
	// Off says, per internal tool that is not offered, why (which setting switched it
	// off), so the model can tell the user where to change it.
	Off map[string]string
}

// Completion is the model's answer for one step: text, tool calls, or both.
type Completion struct {
	Content   string
	ToolCalls []ToolCall
	// Usage is what the step cost, as the endpoint reported it; nil when it did not.
	Usage *Usage
}

// Usage is what model calls cost in tokens; a turn keeps their sum.
type Usage = conversations.Usage

// Provider is an LLM behind one interface. Complete runs one step; onDelta receives
// text tokens as they stream (it may be called zero times by a provider that does not
// stream). The turn loop, not the provider, runs tools and calls Complete again.
type Provider interface {
	Complete(ctx context.Context, req CompletionRequest, onDelta func(string)) (Completion, error)
}
