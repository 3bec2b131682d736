package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

// turnJSON is a turn as GET …/turns/{id} returns it.
type turnJSON struct {
	ID     int64
	Status string
	Error  string
	Usage  *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	}
}

// messages returns the conversation's stored messages.
func (c *client) messages(conv int64) []messageJSON {
	c.t.Helper()
	var msgs []messageJSON
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
	return msgs
}

// storedCall is a tool call as stored in an assistant message's tool_calls.
type storedCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

func storedCalls(t *testing.T, m messageJSON) []storedCall {
	t.Helper()
	if len(m.ToolCalls) == 0 || string(m.ToolCalls) == "null" {
		return nil
	}
	var calls []storedCall
	if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
		t.Fatalf("tool_calls of message %d are not a list of calls: %s (%v)", m.ID, m.ToolCalls, err)
	}
	return calls
}

// lastTool returns the last message of a request, which must be a tool result.
func lastTool(t *testing.T, req openaitest.Request) openaitest.Message {
	t.Helper()
	if len(req.Messages) == 0 {
		t.Fatal("request without messages")
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" || last.ToolCallID == "" {
		t.Fatalf("last message of the request is %+v, want a tool result", last)
	}
	return last
}

// systemText is the request's system message, which must come first if there is one.
func systemText(t *testing.T, req openaitest.Request) string {
	t.Helper()
	for i, m := range req.Messages {
		if m.Role == "system" {
			if i != 0 {
				t.Fatalf("a system message at %d: %+v", i, req.Messages)
			}
			return m.Content
		}
	}
	return ""
}

func sandboxCall(code string) openaitest.Reply {
	args, _ := json.Marshal(map[string]string{"code": code})
	return openaitest.Reply{ToolCalls: []openaitest.Call{{Name: "pyodide_sandbox", Arguments: string(args)}}}
}

// TestTurnsOpenAI drives whole turns through the openai provider against the scripted
// fake endpoint, with the real sandbox: a two-step tool loop, a Python error fed back,
// the tool taken away when the sandbox is switched off, and a rejected API key.
func TestTurnsOpenAI(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t,
		// turn 1: a two-step tool loop, then an answer
		sandboxCall("x = 21*2"),
		sandboxCall("print(x)"),
		openaitest.Reply{Text: "x is 42."},
		// turn 2: a Python error fed back
		sandboxCall("1/0"),
		openaitest.Reply{Text: "That divides by zero."},
		// turn 3: the sandbox is off, the model calls it anyway
		sandboxCall("x"),
		openaitest.Reply{Text: "The sandbox is off."},
		// turn 4: the endpoint rejects the key
		openaitest.Status{Code: 401},
	)
	e := newEnv(t)
	m := e.sandboxNode(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model", MaxRetries: 1}
	})
	alice, _ := m.user(t, "alice", false)
	prompt := "You run Python for the user."
	agent := alice.createAgent(map[string]any{"name": "Coder", "model": "fake-model", "system_prompt": prompt,
		"internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)

	executions := func(t *testing.T) int {
		t.Helper()
		var n int
		if err := m.DB.QueryRow(context.Background(), `select count(*) from executions where conversation_id = $1`, conv).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	ok := t.Run("two-step tool loop", func(t *testing.T) {
		turn := alice.post(conv, "Set x to 21*2, then print it.")
		if tj := alice.finishTurn(conv, turn); tj.Status != "completed" {
			t.Fatalf("turn %+v, want completed", tj)
		}
		reqs := srv.Requests()
		if len(reqs) != 3 {
			t.Fatalf("%d requests to the model, want 3", len(reqs))
		}
		for i, r := range reqs {
			if r.Model != "fake-model" || !r.Authorized || !r.Stream {
				t.Fatalf("request %d: model %q, authorized %v, stream %v", i, r.Model, r.Authorized, r.Stream)
			}
			if len(r.Tools) != 1 || r.Tools[0].Name != "pyodide_sandbox" {
				t.Fatalf("request %d offers tools %+v, want pyodide_sandbox alone", i, r.Tools)
			}
		}
		if sys := systemText(t, reqs[0]); !strings.HasPrefix(sys, prompt) || strings.Contains(sys, "Python sandbox") {
			t.Fatalf("with the sandbox on the system prompt is %q", sys)
		}
		if desc := strings.ToLower(reqs[0].Tools[0].Description); !strings.Contains(desc, "persist") {
			t.Fatalf("tool description does not say state persists: %q", reqs[0].Tools[0].Description)
		}
		if first := reqs[0].Messages; len(first) == 0 || first[len(first)-1].Role != "user" || first[len(first)-1].Content != "Set x to 21*2, then print it." {
			t.Fatalf("first request ends with %+v, want the user's message", first)
		}
		// Step 2 sees step 1's call and its result, paired by id.
		res1 := lastTool(t, reqs[1])
		prev := reqs[1].Messages[len(reqs[1].Messages)-2]
		if prev.Role != "assistant" || len(prev.ToolCalls) != 1 || prev.ToolCalls[0].ID != res1.ToolCallID ||
			prev.ToolCalls[0].Name != "pyodide_sandbox" || !strings.Contains(prev.ToolCalls[0].Arguments, "21*2") {
			t.Fatalf("step 2 request: call %+v, result %+v", prev, res1)
		}
		if !strings.Contains(res1.Content, `"success"`) {
			t.Fatalf("result of x = 21*2 fed back as %q", res1.Content)
		}
		res2 := lastTool(t, reqs[2])
		if !strings.Contains(res2.Content, "42") || !strings.Contains(res2.Content, `"success"`) {
			t.Fatalf("result of print(x) fed back as %q, want 42", res2.Content)
		}
		if res2.ToolCallID == res1.ToolCallID {
			t.Fatalf("both steps answered call %q", res1.ToolCallID)
		}

		// Stored as structured rows: call, result, call, result, answer.
		msgs := alice.messages(conv)
		var roles []string
		for _, msg := range msgs {
			roles = append(roles, msg.Role)
		}
		if got := strings.Join(roles, " "); got != "user assistant tool assistant tool assistant" {
			t.Fatalf("stored roles %q", got)
		}
		for _, i := range []int{1, 3} {
			calls := storedCalls(t, msgs[i])
			if len(calls) != 1 || calls[0].Name != "pyodide_sandbox" || calls[0].ID == "" {
				t.Fatalf("assistant row %d tool_calls %s", i, msgs[i].ToolCalls)
			}
			if msgs[i+1].ToolCallID != calls[0].ID {
				t.Fatalf("tool row %d answers %q, want %q", i+1, msgs[i+1].ToolCallID, calls[0].ID)
			}
			if len(msgs[i+1].ToolCalls) > 0 && string(msgs[i+1].ToolCalls) != "null" {
				t.Fatalf("tool row has tool_calls %s", msgs[i+1].ToolCalls)
			}
		}
		if !strings.Contains(msgs[4].Content, "42") {
			t.Fatalf("stored tool result %q", msgs[4].Content)
		}
		if last := msgs[5]; last.Content != "x is 42." || storedCalls(t, last) != nil || last.ToolCallID != "" {
			t.Fatalf("final answer stored as %+v", last)
		}

		rows, err := m.DB.Query(context.Background(), `select convert_from(code, 'UTF8'), status, convert_from(stdout, 'UTF8') from executions
			where conversation_id = $1 and turn_id = $2 order by id`, conv, turn)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var runs []string
		for rows.Next() {
			var code, status, stdout string
			if err := rows.Scan(&code, &status, &stdout); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, fmt.Sprintf("%s|%s|%s", code, status, stdout))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if want := []string{"x = 21*2|success|", "print(x)|success|42\n"}; fmt.Sprint(runs) != fmt.Sprint(want) {
			t.Fatalf("executions %q, want %q", runs, want)
		}
	})
	ok = ok && t.Run("a Python error is fed back", func(t *testing.T) {
		before := len(srv.Requests())
		turn := alice.post(conv, "Divide one by zero.")
		if tj := alice.finishTurn(conv, turn); tj.Status != "completed" {
			t.Fatalf("turn %+v, want completed", tj)
		}
		reqs := srv.Requests()[before:]
		if len(reqs) != 2 {
			t.Fatalf("%d requests to the model, want 2", len(reqs))
		}
		// The history the model sees keeps the earlier tool exchange structured.
		var calls, results int
		for _, msg := range reqs[0].Messages {
			if msg.Role == "assistant" && len(msg.ToolCalls) > 0 {
				calls++
			}
			if msg.Role == "tool" {
				results++
			}
		}
		if calls != 2 || results != 2 {
			t.Fatalf("turn 2 history has %d calls and %d results, want 2 and 2: %+v", calls, results, reqs[0].Messages)
		}
		res := lastTool(t, reqs[1])
		if !strings.Contains(res.Content, "ZeroDivisionError") || !strings.Contains(res.Content, `"error"`) {
			t.Fatalf("error fed back as %q", res.Content)
		}
		var status string
		if err := m.DB.QueryRow(context.Background(), `select status from executions where turn_id = $1`, turn).Scan(&status); err != nil || status != "error" {
			t.Fatalf("execution status %q (%v), want error", status, err)
		}
		msgs := alice.messages(conv)
		if last := msgs[len(msgs)-1]; last.Role != "assistant" || last.Content != "That divides by zero." {
			t.Fatalf("last stored message %+v", last)
		}
	})
	ok = ok && t.Run("switching the sandbox off removes the tool", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		runsBefore := executions(t)
		before := len(srv.Requests())
		turn := alice.post(conv, "What is x?")
		if tj := alice.finishTurn(conv, turn); tj.Status != "completed" {
			t.Fatalf("turn %+v, want completed", tj)
		}
		reqs := srv.Requests()[before:]
		if len(reqs) != 2 {
			t.Fatalf("%d requests to the model, want 2", len(reqs))
		}
		for i, r := range reqs {
			if len(r.Tools) != 0 {
				t.Fatalf("request %d offers %+v with the sandbox off", i, r.Tools)
			}
			// The agent's prompt says it runs Python: the model is told it cannot now.
			if sys := systemText(t, r); !strings.HasPrefix(sys, prompt) || !strings.Contains(sys, "- Python sandbox: it is switched off for this conversation in the chat toolbar") ||
				!strings.Contains(sys, "never say or imply that you can") {
				t.Fatalf("request %d: with the sandbox off the system prompt is %q", i, sys)
			}
		}
		res := lastTool(t, reqs[1])
		if !strings.Contains(res.Content, "refused") || !strings.Contains(res.Content, "pyodide_sandbox") {
			t.Fatalf("call to the switched-off tool answered with %q", res.Content)
		}
		if n := executions(t); n != runsBefore {
			t.Fatalf("%d executions after the turn, %d before: the switched-off tool ran", n, runsBefore)
		}
		msgs := alice.messages(conv)
		n := len(msgs)
		if n < 3 || msgs[n-2].Role != "tool" || !strings.Contains(msgs[n-2].Content, "refused") ||
			len(storedCalls(t, msgs[n-3])) != 1 || msgs[n-2].ToolCallID != storedCalls(t, msgs[n-3])[0].ID {
			t.Fatalf("refusal not stored as a structured tool result: %+v", msgs[max(0, n-3):])
		}
	})
	ok = ok && t.Run("a rejected API key fails the turn without retrying", func(t *testing.T) {
		before := len(srv.Requests())
		turn := alice.post(conv, "Are you there?")
		tj := alice.finishTurn(conv, turn)
		if tj.Status != "failed" || !strings.Contains(tj.Error, "API key") {
			t.Fatalf("turn %+v, want failed with an error about the API key", tj)
		}
		if strings.Contains(tj.Error, srv.APIKey) || strings.Contains(tj.Error, "sk-op") {
			t.Fatalf("turn error leaks the key: %q", tj.Error)
		}
		if n := len(srv.Requests()) - before; n != 1 {
			t.Fatalf("%d requests for the failed turn, want 1 (401 is not retried)", n)
		}
		if srv.Remaining() != 0 {
			t.Fatalf("%d scripted steps left", srv.Remaining())
		}
		msgs := alice.messages(conv)
		if last := msgs[len(msgs)-1]; last.Role != "user" || last.Content != "Are you there?" {
			t.Fatalf("last stored message %+v, want the user's message alone", last)
		}
	})
	if !ok {
		t.Log("later steps skipped: the fake endpoint's script is shared by all of them")
	}
}
