package toolkits

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// DelegateTool is the tool swarm mode offers a parent to hand work to a child agent.
const DelegateTool = "delegate"

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolSpec describes a tool offered to the model; Parameters is a JSON Schema object.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Turn is what a tool call needs of the assistant turn it runs in; the turn loop
// implements it for one agent at its place in the swarm.
type Turn interface {
	// Emit writes one event of the turn.
	Emit(ctx context.Context, typ string, data map[string]any) error
	// Stream batches many small chunks (a run's output) into few events of type typ.
	Stream(ctx context.Context, typ string, base map[string]any) Stream
	// Vetoed tells whether the user switched toolID off in the conversation since the
	// turn began: the veto holds for the rest of the turn, for every agent.
	Vetoed(ctx context.Context, toolID string) bool
}

// Stream is a batched event stream of a turn.
type Stream interface {
	Add(stream, text string)
	Flush() error
}

// Swarm hands a task to a child agent and returns how it went (completed, failed, or
// refused when the handoff could not even start) and its answer; the turn loop
// implements it, since a child's answer is a turn of its own.
type Swarm interface {
	Delegate(ctx context.Context, child, task string) (status, answer string)
}

// Child is an agent a parent may delegate to.
type Child struct {
	Name        string
	Description string
}

// Tools builds the toolbox of each agent in each turn.
type Tools struct {
	sandbox  *Sandbox
	limits   func() sandbox.StatusLimits
	packages string
	data     *Tables
}

// NewTools returns the tools of this server: the Python sandbox (limits and packages go
// into its description) and swarm delegation.
func NewTools(sb *Sandbox, limits func() sandbox.StatusLimits, packages string) *Tools {
	return &Tools{sandbox: sb, limits: limits, packages: packages}
}

// WithData adds the data analysis tools (describe_file, preview_rows), offered where
// data_analysis is on.
func (k *Tools) WithData(d *Tables) *Tools {
	k.data = d
	return k
}

// Caller is the agent a toolbox serves, in one turn of one conversation.
type Caller struct {
	ConversationID int64
	TurnID         int64
	AgentID        *int64 // nil for a conversation without an agent
	AgentName      string
	Preload        []string // modules the agent has imported before its code
}

// Toolbox is one agent's tools in one turn: exactly the tools that are on, and the
// children it may hand work to.
type Toolbox struct {
	tools    *Tools
	caller   Caller
	turn     Turn
	python   bool
	data     bool
	children []Child
	swarm    Swarm
}

// Toolbox builds the caller's toolbox from the resolved states (Enabled). Delegation
// is offered when swarm is non-nil and there are children.
func (k *Tools) Toolbox(c Caller, enabled map[string]bool, turn Turn, children []Child, swarm Swarm) *Toolbox {
	b := &Toolbox{tools: k, caller: c, turn: turn, python: enabled[PyodideSandbox] && k.sandbox != nil,
		data: enabled[DataAnalysis] && k.data != nil}
	if swarm != nil && len(children) > 0 {
		b.children, b.swarm = children, swarm
	}
	return b
}

// Specs are the tools as offered to the model. The data analysis tools name the
// conversation's attachments as they are now.
func (b *Toolbox) Specs(ctx context.Context) []ToolSpec {
	var specs []ToolSpec
	if b.python {
		name, desc, params := PythonToolSpec(b.tools.limits(), b.tools.packages)
		specs = append(specs, ToolSpec{Name: name, Description: desc, Parameters: params})
	}
	if b.data {
		var names []string
		// Unlisted, the files can still be named: a store that fails here fails the call too.
		uploads, _ := b.tools.data.uploads(ctx, b.caller.ConversationID)
		for _, f := range uploads {
			names = append(names, f.Name)
		}
		specs = append(specs, DataToolSpecs(names)...)
	}
	if b.swarm != nil {
		names := make([]string, len(b.children))
		var lines []string
		for i, c := range b.children {
			names[i] = c.Name
			lines = append(lines, fmt.Sprintf("- %s: %s", c.Name, c.Description))
		}
		params, _ := json.Marshal(map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"agent", "task"},
			"properties": map[string]any{
				"agent": map[string]any{"type": "string", "enum": names, "description": "the child agent to hand the task to"},
				"task":  map[string]any{"type": "string", "description": "what the child should do; it also sees the whole conversation"},
			},
		})
		specs = append(specs, ToolSpec{Name: DelegateTool, Parameters: params,
			Description: "Hand a task to one of your child agents and get its answer. Children see the conversation and share its Python session.\n" + strings.Join(lines, "\n")})
	}
	return specs
}

// Call runs one tool call and returns the compact result given to the model. A call to
// a tool that is not in the toolbox is refused and never executed.
func (b *Toolbox) Call(ctx context.Context, call ToolCall) string {
	switch {
	case call.Name == PyodideSandbox && b.python:
		if b.turn.Vetoed(ctx, PyodideSandbox) {
			return Refuse("The user switched the Python sandbox off for this conversation during this turn; do not call it again.")
		}
		return b.runPython(ctx, call)
	case (call.Name == DescribeFileTool || call.Name == PreviewRowsTool) && b.data:
		if b.turn.Vetoed(ctx, DataAnalysis) {
			return Refuse("The user switched Data analysis off for this conversation during this turn; do not call it again.")
		}
		return b.tools.data.call(ctx, b.caller.ConversationID, call, b.python, b.python && b.tools.sandbox.loadable(ctx, "pandas"))
	case call.Name == DelegateTool && b.swarm != nil:
		return b.delegate(ctx, call)
	}
	return Refuse(fmt.Sprintf("The tool %q is not available to %s in this conversation (it is switched off or unknown); do not call it again.", call.Name, b.caller.AgentName))
}

// Refuse is the result of a call that was not run, with the reason for the model.
func Refuse(msg string) string {
	raw, _ := json.Marshal(ToolResult{Status: StatusRefused, Message: msg})
	return string(raw)
}

func (b *Toolbox) runPython(ctx context.Context, call ToolCall) string {
	var args struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || strings.TrimSpace(args.Code) == "" {
		return Refuse(`Arguments must be {"code": "<python>"}.`)
	}
	base := map[string]any{"turn_id": b.caller.TurnID, "tool_call_id": call.ID, "tool": call.Name}
	if err := b.turn.Emit(ctx, conversations.EventToolStarted, merge(base, map[string]any{"code": args.Code})); err != nil {
		return Refuse("The run could not be recorded: " + sandchat.ErrorMessage(err))
	}
	out := b.turn.Stream(ctx, conversations.EventToolOutput, base)
	shown := 0
	turnID := b.caller.TurnID
	run, err := b.tools.sandbox.Execute(ctx, RunRequest{
		ConversationID: b.caller.ConversationID, AgentID: b.caller.AgentID, TurnID: &turnID, Code: args.Code, Preload: b.caller.Preload,
		OnOutput: out.Add,
		OnDisplay: func(d sandchat.Display) {
			// Output printed before the item goes out first, as the user saw it happen.
			_ = out.Flush()
			// Items are numbered as the run's record will hold them: a clear takes away
			// those before it, an update changes items already numbered.
			index := shown
			switch d.Kind {
			case sandchat.DisplayClear:
				shown, index = 0, 0
			case sandchat.DisplayUpdate:
				index = -1
			default:
				shown++
			}
			_ = b.turn.Emit(ctx, conversations.EventToolDisplay, merge(base, displayData(index, d)))
		},
	})
	_ = out.Flush()
	if err != nil && run.Status == RunStopped {
		_ = b.turn.Emit(ctx, conversations.EventToolCompleted, merge(base, completedData(run)))
		return compactRun(run)
	}
	if err != nil {
		_ = b.turn.Emit(ctx, conversations.EventToolCompleted, merge(base, map[string]any{"status": StatusRefused, "error": sandchat.ErrorMessage(err)}))
		return Refuse("The sandbox could not run the code: " + sandchat.ErrorMessage(err))
	}
	_ = b.turn.Emit(ctx, conversations.EventToolCompleted, merge(base, completedData(run)))
	return compactRun(run)
}

func (b *Toolbox) delegate(ctx context.Context, call ToolCall) string {
	var args struct {
		Agent string `json:"agent"`
		Task  string `json:"task"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return Refuse(`Arguments must be {"agent": "<child name>", "task": "<what to do>"}.`)
	}
	if !slices.ContainsFunc(b.children, func(c Child) bool { return c.Name == args.Agent }) {
		return Refuse(fmt.Sprintf("No child agent called %q.", args.Agent))
	}
	status, answer := b.swarm.Delegate(ctx, args.Agent, args.Task)
	if status == StatusRefused {
		return Refuse(answer)
	}
	raw, _ := json.Marshal(ToolResult{Status: status, Agent: args.Agent, Answer: answer})
	return string(raw)
}

func merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
