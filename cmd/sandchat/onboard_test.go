package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
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

// TestRetryWithSandboxOn: a newcomer's first code meets the sandbox off; the offline
// model says so and does not claim to run Python; once the user switches it on, the
// same message is answered again and its code runs, and later turns see only that
// answer. Only an editor may ask, only for the latest message, and not mid-turn. Its
// author may edit that message as they ask: the new text is stored, other tabs hear of
// it, and the model answers it alone.
func TestRetryWithSandboxOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "vera", false)
	editor, editorID := m.user(t, "ed", false)
	stranger, _ := m.user(t, "sam", false)
	conv := alice.createConversation(0)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": editorID, "role": "editor"}, nil)
	retry := func(msg int64) string { return fmt.Sprintf("/api/v1/conversations/%d/messages/%d/retry", conv, msg) }

	if _, answer := alice.say(conv, "what can you do?"); strings.Contains(answer, "I will run") || !strings.Contains(answer, "cannot run code") {
		t.Fatalf("with the sandbox off, asked what it can do: %q", answer)
	}
	status, answer := alice.say(conv, py("x = 6 * 7\nprint(x)"))
	if status != "completed" || !strings.Contains(answer, "The Python sandbox is off here") {
		t.Fatalf("first code: %s %q", status, answer)
	}
	msgs := alice.messages(conv)
	first, code := msgs[0].ID, msgs[len(msgs)-2].ID
	if msgs[len(msgs)-2].Role != "user" {
		t.Fatalf("messages %+v", msgs)
	}

	t.Run("refused while the sandbox is off is answered the same", func(t *testing.T) {
		var r struct {
			TurnID int64 `json:"turn_id"`
		}
		alice.must(202, "POST", retry(code), nil, &r)
		alice.finishTurn(conv, r.TurnID)
		if msgs := alice.messages(conv); !strings.Contains(msgs[len(msgs)-1].Content, "The Python sandbox is off here") {
			t.Fatalf("answered %q", msgs[len(msgs)-1].Content)
		}
	})
	t.Run("who may ask", func(t *testing.T) {
		viewer.must(403, "POST", retry(code), nil, nil)
		stranger.must(404, "POST", retry(code), nil, nil)
		alice.must(409, "POST", retry(first), nil, nil)
		alice.must(404, "POST", retry(msgs[len(msgs)-1].ID), nil, nil) // an assistant message
		alice.must(404, "POST", retry(code+1000), nil, nil)
		alice.must(404, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages/x/retry", conv), nil, nil)
	})

	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": true}, nil)
	var r struct {
		TurnID int64 `json:"turn_id"`
	}
	alice.must(202, "POST", retry(code), nil, &r)
	if tj := alice.finishTurn(conv, r.TurnID); tj.Status != "completed" {
		t.Fatalf("retry %+v", tj)
	}
	var stdout string
	if err := m.DB.QueryRow(context.Background(), `select convert_from(stdout, 'UTF8') from executions where turn_id = $1`, r.TurnID).Scan(&stdout); err != nil || stdout != "42\n" {
		t.Fatalf("the retry's run printed %q (%v)", stdout, err)
	}
	msgs = alice.messages(conv)
	if last := msgs[len(msgs)-1]; last.Role != "assistant" || !strings.Contains(last.Content, "42") {
		t.Fatalf("the retry answered %+v", last)
	}
	// The turn after sees the code's run, not the refusals: x is defined and it says so.
	if _, answer := alice.say(conv, py("print(x + 1)")); !strings.Contains(answer, "43") {
		t.Fatalf("the next turn: %q", answer)
	}
	if _, answer := alice.say(conv, "what can you do?"); !strings.Contains(answer, "I will run it") {
		t.Fatalf("with the sandbox on, asked what it can do: %q", answer)
	}

	// Edit and resend: a slow message is being answered, then edited.
	slow := alice.post(conv, py("import time\ntime.sleep(2)\nprint('slow')"))
	// The message being answered: the assistant's tool call may already follow it.
	msgs = alice.messages(conv)
	latest := msgs[len(msgs)-1]
	for _, m := range msgs {
		if m.Role == "user" {
			latest = m
		}
	}
	if latest.Role != "user" || !strings.Contains(latest.Content, "slow") {
		t.Fatalf("messages %+v", msgs)
	}
	edit := func(content string) map[string]any { return map[string]any{"content": content} }
	alice.must(409, "POST", retry(latest.ID), edit(py("print(x * 2)")), nil) // while its turn runs
	alice.finishTurn(conv, slow)
	t.Run("who may edit, and what", func(t *testing.T) {
		editor.must(403, "POST", retry(latest.ID), edit(py("print(x * 3)")), nil)
		viewer.must(403, "POST", retry(latest.ID), edit(py("print(x * 3)")), nil)
		stranger.must(404, "POST", retry(latest.ID), edit(py("print(x * 3)")), nil)
		alice.must(400, "POST", retry(latest.ID), edit(" \n "), nil)
		alice.must(413, "POST", retry(latest.ID), edit(strings.Repeat("a", 256<<10+1)), nil)
		alice.must(409, "POST", retry(code), edit(py("print(x * 3)")), nil)
		alice.must(400, "POST", retry(latest.ID), map[string]any{"text": "x"}, nil)
		for _, got := range alice.messages(conv) {
			if got.ID == latest.ID && got.Content != latest.Content {
				t.Fatalf("a refused edit changed the message to %q", got.Content)
			}
		}
	})
	ws := alice.socket()
	ws.subscribe(conv, nil)
	alice.must(202, "POST", retry(latest.ID), edit(py("print(x * 2)")), &r)
	if tj := alice.finishTurn(conv, r.TurnID); tj.Status != "completed" {
		t.Fatalf("edit %+v", tj)
	}
	msgs = alice.messages(conv)
	for _, got := range msgs {
		if got.ID == latest.ID && got.Content != py("print(x * 2)") {
			t.Fatalf("the edited message is %+v", got)
		}
	}
	if last := msgs[len(msgs)-1]; !strings.Contains(last.Content, "84") || strings.Contains(last.Content, "slow") {
		t.Fatalf("the edit was answered %q", last.Content)
	}
	updated := ws.expect("message.updated")
	var ev struct{ Message messageJSON }
	if err := json.Unmarshal(updated.Data, &ev); err != nil || ev.Message.ID != latest.ID || ev.Message.Content != py("print(x * 2)") {
		t.Fatalf("message.updated %s (%v)", updated.Data, err)
	}
	// The next turn sees the edited text only: no sleep, no "slow".
	if status, answer := alice.say(conv, py("print(x + 2)")); status != "completed" || !strings.Contains(answer, "44") {
		t.Fatalf("after the edit: %s %q", status, answer)
	}
}

// TestEditSeenByModel: after its author edits the latest message and has it answered
// again, the model is asked with the new text and without the answer to the old one,
// in that turn and in the next.
func TestEditSeenByModel(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Reply{Text: "Paris."}, openaitest.Reply{Text: "Rome."}, openaitest.Reply{Text: "Yes."})
	e := newEnv(t)
	m := e.node(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model", MaxRetries: 1}
	})
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Guide", "model": "fake-model"})
	conv := alice.createConversation(agent.ID)
	if status, answer := alice.say(conv, "Capital of France?"); status != "completed" || answer != "Paris." {
		t.Fatalf("first turn %s %q", status, answer)
	}
	msgs := alice.messages(conv)
	var r struct {
		TurnID int64 `json:"turn_id"`
	}
	alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages/%d/retry", conv, msgs[0].ID), map[string]any{"content": "Capital of Italy?"}, &r)
	if tj := alice.finishTurn(conv, r.TurnID); tj.Status != "completed" {
		t.Fatalf("edit %+v", tj)
	}
	if status, answer := alice.say(conv, "Sure?"); status != "completed" || answer != "Yes." {
		t.Fatalf("next turn %s %q", status, answer)
	}
	seen := func(req openaitest.Request) string {
		var out []string
		for _, m := range req.Messages {
			if m.Role != "system" {
				out = append(out, m.Role+":"+m.Content)
			}
		}
		return strings.Join(out, " ")
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests to the model, want 3", len(reqs))
	}
	if got, want := seen(reqs[1]), "user:Capital of Italy?"; got != want {
		t.Fatalf("the edit's turn asked with %q, want %q", got, want)
	}
	if got, want := seen(reqs[2]), "user:Capital of Italy? assistant:Rome. user:Sure?"; got != want {
		t.Fatalf("the next turn asked with %q, want %q", got, want)
	}
}

// TestAnswerVersions: the answers to a user message are versions. An edit adds one and
// makes it current; switching back to the first brings its text back, for every tab
// (message.updated) and for the model of the next turn, which sees only the current
// version. Who may switch, and when: editors, between turns, to an answer of that
// message.
func TestAnswerVersions(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Reply{Text: "Paris."}, openaitest.Reply{Text: "Rome."}, openaitest.Reply{Text: "Yes, Paris."}, openaitest.Reply{Stall: true})
	e := newEnv(t)
	m := e.node(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model", MaxRetries: 1}
	})
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "vera", false)
	stranger, _ := m.user(t, "sam", false)
	agent := alice.createAgent(map[string]any{"name": "Guide", "model": "fake-model"})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	if status, answer := alice.say(conv, "Capital of France?"); status != "completed" || answer != "Paris." {
		t.Fatalf("first turn %s %q", status, answer)
	}
	type versioned struct {
		ID           int64
		TurnID       int64   `json:"turn_id"`
		Role         string  `json:"role"`
		Content      string  `json:"content"`
		AnswerTurnID int64   `json:"answer_turn_id"`
		Versions     []int64 `json:"versions"`
	}
	list := func() []versioned {
		var msgs []versioned
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
		return msgs
	}
	first := list()[0]
	if first.Role != "user" || len(first.Versions) != 1 || first.AnswerTurnID != first.Versions[0] || first.TurnID != first.Versions[0] {
		t.Fatalf("a new message's versions: %+v", first)
	}
	var r struct {
		TurnID int64 `json:"turn_id"`
	}
	alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/messages/%d/retry", conv, first.ID), map[string]any{"content": "Capital of Italy?"}, &r)
	if tj := alice.finishTurn(conv, r.TurnID); tj.Status != "completed" {
		t.Fatalf("edit %+v", tj)
	}
	msgs := list()
	if msgs[0].Content != "Capital of Italy?" || !slices.Equal(msgs[0].Versions, []int64{first.TurnID, r.TurnID}) || msgs[0].AnswerTurnID != r.TurnID {
		t.Fatalf("after the edit: %+v", msgs[0])
	}
	// Both answers are listed, each with its turn: a client shows the current one.
	if len(msgs) != 3 || msgs[1].TurnID != first.TurnID || msgs[1].Content != "Paris." || msgs[2].TurnID != r.TurnID || msgs[2].Content != "Rome." {
		t.Fatalf("messages %+v", msgs)
	}

	answer := fmt.Sprintf("/api/v1/conversations/%d/messages/%d/answer", conv, first.ID)
	ws := alice.socket()
	ws.subscribe(conv, nil)
	var back versioned
	alice.must(200, "PUT", answer, map[string]any{"turn_id": first.TurnID}, &back)
	if back.Content != "Capital of France?" || back.AnswerTurnID != first.TurnID || len(back.Versions) != 2 {
		t.Fatalf("switched back: %+v", back)
	}
	var ev struct{ Message versioned }
	if err := json.Unmarshal(ws.expect("message.updated").Data, &ev); err != nil || ev.Message.AnswerTurnID != first.TurnID || ev.Message.Content != "Capital of France?" {
		t.Fatalf("message.updated %+v (%v)", ev.Message, err)
	}
	if msgs := list(); msgs[0].AnswerTurnID != first.TurnID || msgs[0].Content != "Capital of France?" {
		t.Fatalf("the switch is not kept: %+v", msgs[0])
	}
	t.Run("who may switch, and to what", func(t *testing.T) {
		viewer.must(403, "PUT", answer, map[string]any{"turn_id": r.TurnID}, nil)
		stranger.must(404, "PUT", answer, map[string]any{"turn_id": r.TurnID}, nil)
		alice.must(400, "PUT", answer, map[string]any{"turn": r.TurnID}, nil)
		alice.must(404, "PUT", answer, map[string]any{"turn_id": r.TurnID + 1000}, nil)
		alice.must(404, "PUT", fmt.Sprintf("/api/v1/conversations/%d/messages/%d/answer", conv, msgs[1].ID), map[string]any{"turn_id": first.TurnID}, nil)
	})

	if status, answer := alice.say(conv, "Sure?"); status != "completed" || answer != "Yes, Paris." {
		t.Fatalf("next turn %s %q", status, answer)
	}
	seen := func(req openaitest.Request) string {
		var out []string
		for _, m := range req.Messages {
			if m.Role != "system" {
				out = append(out, m.Role+":"+m.Content)
			}
		}
		return strings.Join(out, " ")
	}
	reqs := srv.Requests()
	if got, want := seen(reqs[2]), "user:Capital of France? assistant:Paris. user:Sure?"; got != want {
		t.Fatalf("after switching back, the next turn asked with %q, want %q", got, want)
	}
	t.Run("not while a turn runs", func(t *testing.T) {
		turn := alice.post(conv, "And Spain?")
		alice.must(409, "PUT", answer, map[string]any{"turn_id": r.TurnID}, nil)
		alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", conv, turn), nil, nil)
		alice.finishTurn(conv, turn)
	})
}
