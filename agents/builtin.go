package agents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/sandchat/sandchat/toolkits"
)

// Builtin is the offline, deterministic model (but for its calls' ids). It runs each fenced ```python block of
// the user's message through pyodide_sandbox when that tool is on and answers with the
// output; says plainly when it is off; describes the attachments a message names with
// describe_file when data analysis is on, answering from its summary; hands "@child-name task" to a child agent when
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
		if spec := offered(tools, toolkits.DescribeFileTool); spec != nil {
			if named := namedFiles(text, fileChoices(*spec)); len(named) > 0 {
				var out Completion
				for i, f := range named {
					args, _ := json.Marshal(map[string]string{"file": f})
					out.ToolCalls = append(out.ToolCalls, ToolCall{ID: callID(n, i), Name: toolkits.DescribeFileTool, Arguments: args})
				}
				return out
			}
		}
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
	if spec := offered(req.Tools, toolkits.DescribeFileTool); spec != nil {
		if files := fileChoices(*spec); len(files) > 0 {
			b.WriteString(" Name an attachment (" + strings.Join(files, ", ") + ") and I will describe its columns.")
		}
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
		case r.Status == "error" && r.Summary != "":
			parts = append(parts, "I could not read that file as a table: "+r.Summary)
		case r.Summary != "":
			// Fenced: the summary quotes the file's own cells, which are text, never
			// Markdown (a cell's =HYPERLINK("http://…") must not become a link).
			parts = append(parts, "```\n"+strings.ReplaceAll(r.Summary, "```", "` ` `")+"\n```")
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

// maxDescribed bounds the attachments one message gets described.
const maxDescribed = 4

// namedFiles are the attachments (paths under /data) that text names, by path or by
// file name, longest first so "q1.csv" inside "reports/q1.csv" is not named twice.
func namedFiles(text string, files []string) []string {
	lower := strings.ToLower(text)
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b string) int { return len(b) - len(a) })
	var out []string
	for _, f := range sorted {
		for _, name := range []string{strings.ToLower(f), strings.ToLower(path.Base(f))} {
			if i := nameAt(lower, name); i >= 0 {
				lower = lower[:i] + strings.Repeat(" ", len(name)) + lower[i+len(name):]
				out = append(out, f)
				break
			}
		}
		if len(out) == maxDescribed {
			break
		}
	}
	return out
}

// fileChoices are the attachments a describe_file spec names.
func fileChoices(spec ToolSpec) []string {
	var p struct {
		Properties struct {
			File struct {
				Enum []string `json:"enum"`
			} `json:"file"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(spec.Parameters, &p)
	return p.Properties.File.Enum
}

// nameAt is where name stands in text as a name of its own (not the tail of a longer
// one, as a.csv in data.csv), or -1.
func nameAt(text, name string) int {
	for from := 0; ; {
		i := strings.Index(text[from:], name)
		if i < 0 {
			return -1
		}
		i += from
		if i == 0 || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789_-./", rune(text[i-1])) {
			return i
		}
		from = i + 1
	}
}
