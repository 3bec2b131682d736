package agents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/sandchat/sandchat/toolkits"
)

// Builtin is the offline, deterministic model (but for its calls' ids). It runs each fenced ```python block of
// the user's message through pyodide_sandbox when that tool is on and answers with the
// output; says plainly when it is off; hands "@child-name task" to a child agent when
// swarm mode offers the delegate tool; and otherwise says what it can do with the tools
// it was given in this turn, and nothing more.
type Builtin struct{}

var (
	fenced   = regexp.MustCompile("(?s)```(?:python|py)[ \t]*\r?\n(.*?)```")
	mention  = regexp.MustCompile(`(?s)^\s*@([A-Za-z0-9_.-]+)\s*(.*)$`)
	wordLike = regexp.MustCompile(`\S+\s*`)
)

func (Builtin) Complete(ctx context.Context, req CompletionRequest, onDelta func(string)) (Completion, error) {
	if err := ctx.Err(); err != nil {
		return Completion{}, err
	}
	if len(req.Messages) == 0 {
		return Completion{}, fmt.Errorf("builtin: no messages")
	}
	last := req.Messages[len(req.Messages)-1]
	var out Completion
	switch last.Role {
	case RoleTool:
		out.Content = summarizeResults(req.Messages)
	case RoleUser:
		out = answer(last.Content, req, len(req.Messages))
	default:
		out.Content = "I have nothing to add."
	}
	if out.Content != "" && onDelta != nil {
		for _, w := range wordLike.FindAllString(out.Content, -1) {
			onDelta(w)
		}
	}
	return out, nil
}

func offered(tools []ToolSpec, name string) *ToolSpec {
	for i := range tools {
		if tools[i].Name == name {
			return &tools[i]
		}
	}
	return nil
}

func answer(text string, req CompletionRequest, n int) Completion {
	tools := req.Tools
	if m := mention.FindStringSubmatch(text); m != nil {
		name, task := m[1], strings.TrimSpace(m[2])
		spec := offered(tools, DelegateTool)
		if spec == nil {
			return Completion{Content: fmt.Sprintf("Swarm mode is off, so I cannot hand this to @%s. Switch on Swarm mode in Internal tools (and give the agent children) to delegate.", name)}
		}
		children := delegateChoices(*spec)
		if !slices.Contains(children, name) {
			return Completion{Content: fmt.Sprintf("I have no child agent called @%s. My children are: %s.", name, strings.Join(children, ", "))}
		}
		args, _ := json.Marshal(map[string]string{"agent": name, "task": task})
		return Completion{ToolCalls: []ToolCall{{ID: callID(n, 0), Name: DelegateTool, Arguments: args}}}
	}
	blocks := fenced.FindAllStringSubmatch(text, -1)
	python := offered(tools, toolkits.PyodideSandbox) != nil
	if len(blocks) == 0 {
		return Completion{Content: introduction(req, python)}
	}
	if !python {
		return Completion{Content: "The Python sandbox is off here, so I cannot run this code: " + offReason(req) + "."}
	}
	var out Completion
	for i, b := range blocks {
		args, _ := json.Marshal(map[string]string{"code": b[1]})
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: callID(n, i), Name: "pyodide_sandbox", Arguments: args})
	}
	return out
}

// callID names the i-th call of an answer to a context of n messages. A message answered
// again (Runner.Retry) has the same context as before, so a random part keeps the new
// calls' ids apart from the earlier answer's, which stay in the history: clients find a
// call's output by its id.
func callID(n, i int) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("call_%d_%d_%s", n, i, hex.EncodeToString(b))
}

// introduction says what this model can do in this turn: only what its tools allow, so
// it never claims to run Python with the sandbox off.
func introduction(req CompletionRequest, python bool) string {
	var b strings.Builder
	b.WriteString("I am the built-in offline assistant. ")
	if python {
		b.WriteString("Send Python in a fenced ```python block and I will run it in this conversation's sandbox, where variables, imports and files persist from one message to the next.")
	} else {
		b.WriteString("The Python sandbox is off here, so I cannot run code: " + offReason(req) + ". Until then I can only reply briefly.")
	}
	if spec := offered(req.Tools, DelegateTool); spec != nil {
		b.WriteString(" Write @name and a task to hand it to one of my child agents (" + strings.Join(delegateChoices(*spec), ", ") + ").")
	}
	return b.String()
}

// offReason is where the setting that keeps the sandbox off lives.
func offReason(req CompletionRequest) string {
	if why := req.Off[toolkits.PyodideSandbox]; why != "" {
		return why
	}
	return "switch it on in the chat toolbar (Internal tools → Python sandbox)"
}

// summarizeResults answers with the results of the tool calls of the last assistant
// message, in order.
func summarizeResults(msgs []ChatMessage) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == RoleTool {
		start--
	}
	var parts []string
	for _, m := range msgs[start:] {
		var r toolkits.ToolResult
		if err := json.Unmarshal([]byte(m.Content), &r); err != nil {
			parts = append(parts, m.Content)
			continue
		}
		switch {
		case r.Agent != "":
			parts = append(parts, fmt.Sprintf("@%s: %s", r.Agent, r.Answer))
		case r.Status == toolkits.StatusRefused:
			parts = append(parts, "I could not do that: "+r.Message)
		case r.Error != nil:
			out := r.Stdout
			parts = append(parts, fmt.Sprintf("%s```\n%s: %s\n```", fence(out), r.Error.Type, r.Error.Message))
		default:
			out := r.Stdout
			if r.Result != nil {
				out += *r.Result + "\n"
			}
			if out == "" {
				out = "(no output)\n"
			}
			s := "```\n" + out + "```"
			if len(r.Artifacts) > 0 {
				s += "\nFiles: " + strings.Join(r.Artifacts, ", ")
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n\n")
}

func fence(s string) string {
	if s == "" {
		return ""
	}
	return "```\n" + s + "```\n"
}

func delegateChoices(spec ToolSpec) []string {
	var p struct {
		Properties struct {
			Agent struct {
				Enum []string `json:"enum"`
			} `json:"agent"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(spec.Parameters, &p)
	return p.Properties.Agent.Enum
}
