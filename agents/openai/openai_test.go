package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/agents/openai/openaitest"
	"github.com/sandchat/sandchat/migrations/testenv"
)

type testBundle struct {
	srv    *openaitest.Server
	logs   *testenv.Buffer
	mu     sync.Mutex
	delays []time.Duration // the waits between attempts, recorded instead of slept
}

func (b *testBundle) Delays() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.delays...)
}

// setup starts a fake endpoint scripted with steps and a provider pointed at it.
// tweak, when not nil, adjusts the config before New.
func setup(t *testing.T, tweak func(*Config), steps ...openaitest.Step) (*Provider, *testBundle) {
	t.Helper()
	b := &testBundle{srv: openaitest.New(t, steps...), logs: &testenv.Buffer{}}
	cfg := Config{
		BaseURL:    b.srv.URL,
		APIKey:     b.srv.APIKey,
		Model:      "test-model",
		MaxRetries: 2,
		// Tiny, though tests record the waits rather than sleep them.
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  10 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), b.logs), nil))
	p, err := New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.sleep = func(ctx context.Context, d time.Duration) error {
		b.mu.Lock()
		b.delays = append(b.delays, d)
		b.mu.Unlock()
		return ctx.Err()
	}
	return p, b
}

var userHello = agents.CompletionRequest{Messages: []agents.ChatMessage{{Role: agents.RoleUser, Content: "hello"}}}

// complete runs one step and collects the streamed deltas.
func complete(t *testing.T, ctx context.Context, p *Provider, req agents.CompletionRequest) (agents.Completion, []string, error) {
	t.Helper()
	var deltas []string
	comp, err := p.Complete(ctx, req, func(s string) { deltas = append(deltas, s) })
	return comp, deltas, err
}

func TestCompleteStreamsText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
	}{
		{name: "sentence", text: "The answer is 42, as computed."},
		{name: "multibyte", text: "Größe: 3 × 4 = 12 ✓"},
		{name: "single rune", text: "k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := setup(t, nil, openaitest.Reply{Text: tt.text})
			comp, deltas, err := complete(t, t.Context(), p, userHello)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if comp.Content != tt.text {
				t.Errorf("Content = %q, want %q", comp.Content, tt.text)
			}
			if got := strings.Join(deltas, ""); got != tt.text {
				t.Errorf("deltas joined = %q, want %q", got, tt.text)
			}
			if len([]rune(tt.text)) >= 3 && len(deltas) < 2 {
				t.Errorf("got %d deltas %q, want the text streamed in several", len(deltas), deltas)
			}
			if len(comp.ToolCalls) != 0 {
				t.Errorf("ToolCalls = %v, want none", comp.ToolCalls)
			}
			if n := len(b.srv.Requests()); n != 1 {
				t.Errorf("server got %d requests, want 1", n)
			}
		})
	}
}

func TestCompleteAssemblesToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		reply    openaitest.Reply
		want     agents.Completion
		noDeltas bool
	}{
		{
			name:     "one call",
			reply:    openaitest.Reply{ToolCalls: []openaitest.Call{{ID: "call_a", Name: "pyodide_sandbox", Arguments: `{"code":"x = 1\nprint(x)"}`}}},
			want:     agents.Completion{ToolCalls: []agents.ToolCall{{ID: "call_a", Name: "pyodide_sandbox", Arguments: json.RawMessage(`{"code":"x = 1\nprint(x)"}`)}}},
			noDeltas: true,
		},
		{
			name: "two parallel calls with fragmented arguments",
			reply: openaitest.Reply{ToolCalls: []openaitest.Call{
				{ID: "call_1", Name: "pyodide_sandbox", Arguments: `{"code":"import math; print(math.pi)"}`},
				{ID: "call_2", Name: "delegate", Arguments: `{"agent":"child-b","task":"check the result"}`},
			}},
			want: agents.Completion{ToolCalls: []agents.ToolCall{
				{ID: "call_1", Name: "pyodide_sandbox", Arguments: json.RawMessage(`{"code":"import math; print(math.pi)"}`)},
				{ID: "call_2", Name: "delegate", Arguments: json.RawMessage(`{"agent":"child-b","task":"check the result"}`)},
			}},
			noDeltas: true,
		},
		{
			name: "text then a call",
			reply: openaitest.Reply{Text: "Let me compute that.", ToolCalls: []openaitest.Call{
				{ID: "call_x", Name: "pyodide_sandbox", Arguments: `{"code":"2**10"}`},
			}},
			want: agents.Completion{Content: "Let me compute that.", ToolCalls: []agents.ToolCall{
				{ID: "call_x", Name: "pyodide_sandbox", Arguments: json.RawMessage(`{"code":"2**10"}`)},
			}},
		},
		{
			name:     "empty arguments become an empty object",
			reply:    openaitest.Reply{ToolCalls: []openaitest.Call{{ID: "call_e", Name: "list_files"}}},
			want:     agents.Completion{ToolCalls: []agents.ToolCall{{ID: "call_e", Name: "list_files", Arguments: json.RawMessage(`{}`)}}},
			noDeltas: true,
		},
		{
			name:     "malformed arguments are kept as a JSON string",
			reply:    openaitest.Reply{ToolCalls: []openaitest.Call{{ID: "call_m", Name: "pyodide_sandbox", Arguments: `{"code":"print(`}}},
			want:     agents.Completion{ToolCalls: []agents.ToolCall{{ID: "call_m", Name: "pyodide_sandbox", Arguments: json.RawMessage(`"{\"code\":\"print("`)}}},
			noDeltas: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := setup(t, nil, tt.reply)
			comp, deltas, err := complete(t, t.Context(), p, userHello)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			assertCompletion(t, comp, tt.want)
			if got := strings.Join(deltas, ""); got != tt.want.Content {
				t.Errorf("deltas joined = %q, want %q", got, tt.want.Content)
			}
			if tt.noDeltas && len(deltas) != 0 {
				t.Errorf("onDelta called with %q for an answer without text", deltas)
			}
		})
	}
}

func assertCompletion(t *testing.T, got, want agents.Completion) {
	t.Helper()
	if got.Content != want.Content {
		t.Errorf("Content = %q, want %q", got.Content, want.Content)
	}
	if len(got.ToolCalls) != len(want.ToolCalls) {
		t.Fatalf("ToolCalls = %+v, want %+v", got.ToolCalls, want.ToolCalls)
	}
	for i := range want.ToolCalls {
		g, w := got.ToolCalls[i], want.ToolCalls[i]
		if g.ID != w.ID || g.Name != w.Name || !bytes.Equal(g.Arguments, w.Arguments) {
			t.Errorf("ToolCalls[%d] = {%s %s %s}, want {%s %s %s}", i, g.ID, g.Name, g.Arguments, w.ID, w.Name, w.Arguments)
		}
	}
}

// A malformed-arguments call must survive the round trip the turn loop makes: stored,
// marshalled, and sent back to the model as the text the model wrote.
func TestToolArgumentsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, text := range []string{`{"code":"print(`, `{"a":1}`, `not json`} {
		t.Run(text, func(t *testing.T) {
			raw := toolArguments(text)
			if !json.Valid(raw) {
				t.Fatalf("toolArguments(%q) = %s, not valid JSON", text, raw)
			}
			if got := argumentsString(raw); got != text {
				t.Errorf("argumentsString(toolArguments(%q)) = %q", text, got)
			}
		})
	}
}

func TestCompleteSendsConversation(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`)
	req := agents.CompletionRequest{
		Messages: []agents.ChatMessage{
			{Role: agents.RoleSystem, Content: "You are terse."},
			{Role: agents.RoleUser, Content: "compute x"},
			{Role: agents.RoleAssistant, Name: "math helper", ToolCalls: []agents.ToolCall{
				{ID: "call_1", Name: "pyodide_sandbox", Arguments: json.RawMessage(`{"code":"x=1"}`)},
				{ID: "call_2", Name: "pyodide_sandbox", Arguments: json.RawMessage(`"{\"code\":\"print("`)},
			}},
			{Role: agents.RoleTool, ToolCallID: "call_1", Content: `{"status":"ok","stdout":""}`},
			{Role: agents.RoleTool, ToolCallID: "call_2", Content: ""},
			{Role: agents.RoleAssistant, Content: "x is set."},
			{Role: agents.RoleUser, Content: "thanks"},
		},
		Tools: []agents.ToolSpec{
			{Name: "pyodide_sandbox", Description: "Runs Python.", Parameters: schema},
			{Name: "list_files"},
		},
	}
	wantMessages := []openaitest.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "compute x"},
		{Role: "assistant", Name: "math_helper", ToolCalls: []openaitest.Call{
			{ID: "call_1", Name: "pyodide_sandbox", Arguments: `{"code":"x=1"}`},
			{ID: "call_2", Name: "pyodide_sandbox", Arguments: `{"code":"print(`},
		}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"status":"ok","stdout":""}`},
		{Role: "tool", ToolCallID: "call_2", Content: ""},
		{Role: "assistant", Content: "x is set."},
		{Role: "user", Content: "thanks"},
	}

	tests := []struct {
		name      string
		model     string
		wantModel string
	}{
		{name: "default model", wantModel: "test-model"},
		{name: "request model wins", model: "other-model", wantModel: "other-model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := setup(t, nil, openaitest.Reply{Text: "ok"})
			req := req
			req.Model = tt.model
			if _, _, err := complete(t, t.Context(), p, req); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			reqs := b.srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("server got %d requests, want 1", len(reqs))
			}
			got := reqs[0]
			if got.Model != tt.wantModel {
				t.Errorf("model = %q, want %q", got.Model, tt.wantModel)
			}
			if !got.Stream {
				t.Error("request does not ask for a stream")
			}
			if len(got.Messages) != len(wantMessages) {
				t.Fatalf("messages = %+v, want %+v", got.Messages, wantMessages)
			}
			for i, w := range wantMessages {
				g := got.Messages[i]
				if g.Role != w.Role || g.Content != w.Content || g.Name != w.Name || g.ToolCallID != w.ToolCallID || !equalCalls(g.ToolCalls, w.ToolCalls) {
					t.Errorf("messages[%d] = %+v, want %+v", i, g, w)
				}
			}
			// The API requires a tool message's content even when the tool printed nothing.
			if !bytes.Contains(got.Body, []byte(`"content":"","tool_call_id":"call_2"`)) && !bytes.Contains(got.Body, []byte(`"tool_call_id":"call_2","content":""`)) {
				t.Errorf("empty tool result not sent as an empty string: %s", got.Body)
			}
			if len(got.Tools) != 2 {
				t.Fatalf("tools = %+v, want 2", got.Tools)
			}
			if tool := got.Tools[0]; tool.Name != "pyodide_sandbox" || tool.Description != "Runs Python." || !jsonEqual(t, tool.Parameters, schema) {
				t.Errorf("tools[0] = {%s %q %s}, want pyodide_sandbox with its schema", tool.Name, tool.Description, tool.Parameters)
			}
			if tool := got.Tools[1]; tool.Name != "list_files" || tool.Description != "" || !jsonEqual(t, tool.Parameters, json.RawMessage(`{"type":"object","properties":{}}`)) {
				t.Errorf("tools[1] = {%s %q %s}, want list_files with no description and an empty object schema", tool.Name, tool.Description, tool.Parameters)
			}
		})
	}
}

func equalCalls(a, b []openaitest.Call) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}

func TestCompleteRejectsBadRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  agents.CompletionRequest
	}{
		{name: "unknown role", req: agents.CompletionRequest{Messages: []agents.ChatMessage{{Role: "narrator", Content: "x"}}}},
		{name: "tool message without id", req: agents.CompletionRequest{Messages: []agents.ChatMessage{{Role: agents.RoleTool, Content: "x"}}}},
		{name: "malformed schema", req: agents.CompletionRequest{
			Messages: userHello.Messages,
			Tools:    []agents.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1,2]`)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := setup(t, nil)
			_, _, err := complete(t, t.Context(), p, tt.req)
			if code := sandchat.ErrorCode(err); code != sandchat.EINTERNAL {
				t.Errorf("error code = %q (%v), want %q", code, err, sandchat.EINTERNAL)
			}
			if n := len(b.srv.Requests()); n != 0 {
				t.Errorf("server got %d requests, want none", n)
			}
		})
	}
}

func TestCompleteRetries(t *testing.T) {
	t.Parallel()
	const base = time.Millisecond
	tests := []struct {
		name     string
		steps    []openaitest.Step
		wrongKey bool
		// wantCode is "" for success, in which case the last step's text is expected.
		wantCode     string
		wantMessage  string // a substring of the caller-safe message
		wantRequests int
		// wantDelays are exact waits; without them, each wait is checked against the backoff bounds.
		wantDelays []time.Duration
	}{
		{
			name:         "429 then success",
			steps:        []openaitest.Step{openaitest.Status{Code: 429}, openaitest.Reply{Text: "done"}},
			wantRequests: 2,
		},
		{
			name:         "500 then 503 then success",
			steps:        []openaitest.Step{openaitest.Status{Code: 500}, openaitest.Status{Code: 503}, openaitest.Reply{Text: "done"}},
			wantRequests: 3,
		},
		{
			name:         "429 honours Retry-After",
			steps:        []openaitest.Step{openaitest.Status{Code: 429, RetryAfter: "2"}, openaitest.Reply{Text: "done"}},
			wantRequests: 2,
			wantDelays:   []time.Duration{2 * time.Second},
		},
		{
			name:         "retries exhausted",
			steps:        []openaitest.Step{openaitest.Status{Code: 503}, openaitest.Status{Code: 502}, openaitest.Status{Code: 500}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "unavailable (HTTP 500 after 3 attempts)",
			wantRequests: 3,
		},
		{
			name:         "Retry-After beyond the max delay is not waited for",
			steps:        []openaitest.Step{openaitest.Status{Code: 429, RetryAfter: "3600"}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "asks to wait 1h0m0s",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "401 fails at once",
			steps:        []openaitest.Step{openaitest.Status{Code: 401}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "rejected the API key (HTTP 401)",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "wrong key fails at once",
			wrongKey:     true,
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "rejected the API key (HTTP 401)",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "403 fails at once",
			steps:        []openaitest.Step{openaitest.Status{Code: 403}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "rejected the API key (HTTP 403)",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "spent quota is not retried",
			steps:        []openaitest.Step{openaitest.Status{Code: 429, ErrCode: "insufficient_quota", Type: "insufficient_quota"}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "quota is exhausted",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "unknown model",
			steps:        []openaitest.Step{openaitest.Status{Code: 404}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  `does not serve model "test-model"`,
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "context window exceeded",
			steps:        []openaitest.Step{openaitest.Status{Code: 400, ErrCode: "context_length_exceeded"}},
			wantCode:     sandchat.EINVALID,
			wantMessage:  "too long",
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
		{
			name:         "other 400 is internal",
			steps:        []openaitest.Step{openaitest.Status{Code: 400, Message: "Invalid schema for function 'x'."}},
			wantCode:     sandchat.EINTERNAL,
			wantRequests: 1,
			wantDelays:   []time.Duration{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := setup(t, func(c *Config) {
				c.RetryBaseDelay = base
				if tt.wrongKey {
					c.APIKey = "sk-wrong-secret-key"
				}
			}, tt.steps...)
			comp, _, err := complete(t, t.Context(), p, userHello)

			if code := sandchat.ErrorCode(err); code != tt.wantCode {
				t.Fatalf("error code = %q (%v), want %q", code, err, tt.wantCode)
			}
			if tt.wantCode == "" && comp.Content != "done" {
				t.Errorf("Content = %q, want %q", comp.Content, "done")
			}
			if msg := sandchat.ErrorMessage(err); !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", msg, tt.wantMessage)
			}
			if n := len(b.srv.Requests()); n != tt.wantRequests {
				t.Errorf("server got %d requests, want %d", n, tt.wantRequests)
			}
			delays := b.Delays()
			if tt.wantDelays != nil {
				if len(delays) != len(tt.wantDelays) {
					t.Fatalf("waits = %v, want %v", delays, tt.wantDelays)
				}
				for i := range delays {
					if delays[i] != tt.wantDelays[i] {
						t.Errorf("waits = %v, want %v", delays, tt.wantDelays)
					}
				}
			} else {
				for i, d := range delays {
					if hi := base << i; d < hi/2 || d > hi {
						t.Errorf("wait %d = %v, want within [%v, %v]", i, d, hi/2, hi)
					}
				}
			}
			seen := b.logs.String()
			if err != nil {
				seen += err.Error()
			}
			for _, key := range []string{b.srv.APIKey, "sk-wrong-secret-key"} {
				if strings.Contains(seen, key) {
					t.Errorf("the API key leaked into the error or the logs")
				}
			}
		})
	}
}

func TestCompleteCancel(t *testing.T) {
	t.Parallel()
	t.Run("mid-stream", func(t *testing.T) {
		p, b := setup(t, nil, openaitest.Reply{Text: "partial answer", Stall: true})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// The server stalls after the text: only the cancellation can end the stream.
		comp, err := p.Complete(ctx, userHello, func(string) { cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if comp.Content == "" || !strings.HasPrefix("partial answer", comp.Content) {
			t.Errorf("Content = %q, want the streamed prefix of %q", comp.Content, "partial answer")
		}
		if n := len(b.srv.Requests()); n != 1 {
			t.Errorf("server got %d requests, want 1", n)
		}
	})
	t.Run("during backoff", func(t *testing.T) {
		p, b := setup(t, nil, openaitest.Status{Code: 503}, openaitest.Reply{Text: "never"})
		ctx, cancel := context.WithCancel(t.Context())
		p.sleep = func(ctx context.Context, d time.Duration) error {
			cancel()
			return sleepContext(ctx, time.Hour)
		}
		_, err := p.Complete(ctx, userHello, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if n := b.srv.Remaining(); n != 1 {
			t.Errorf("%d scripted steps left, want the retry not made", n)
		}
	})
}

func TestCompleteStalledStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		steps        []openaitest.Step
		wantCode     string
		wantMessage  string
		wantRequests int
	}{
		{
			name:         "stall before any text is retried",
			steps:        []openaitest.Step{openaitest.Reply{Stall: true}, openaitest.Reply{Text: "done"}},
			wantRequests: 2,
		},
		{
			name:         "stall after text is not retried",
			steps:        []openaitest.Step{openaitest.Reply{Text: "half an ans", Stall: true}},
			wantCode:     sandchat.EUNAVAILABLE,
			wantMessage:  "interrupted (no data within the timeout)",
			wantRequests: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Short enough to keep the test quick; its length does not change the outcome.
			p, b := setup(t, func(c *Config) { c.Timeout = 100 * time.Millisecond }, tt.steps...)
			comp, _, err := complete(t, t.Context(), p, userHello)
			if code := sandchat.ErrorCode(err); code != tt.wantCode {
				t.Fatalf("error code = %q (%v), want %q", code, err, tt.wantCode)
			}
			if tt.wantCode == "" && comp.Content != "done" {
				t.Errorf("Content = %q, want %q", comp.Content, "done")
			}
			if msg := sandchat.ErrorMessage(err); !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", msg, tt.wantMessage)
			}
			if n := len(b.srv.Requests()); n != tt.wantRequests {
				t.Errorf("server got %d requests, want %d", n, tt.wantRequests)
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	valid := Config{BaseURL: "http://localhost:11434/v1", APIKey: "k", Model: "m"}
	tests := []struct {
		name    string
		tweak   func(*Config)
		wantErr string
	}{
		{name: "valid", tweak: func(*Config) {}},
		{name: "default base URL", tweak: func(c *Config) { c.BaseURL = "" }},
		{name: "relative base URL", tweak: func(c *Config) { c.BaseURL = "localhost/v1" }, wantErr: "absolute http(s) URL"},
		{name: "other scheme", tweak: func(c *Config) { c.BaseURL = "ftp://host/v1" }, wantErr: "absolute http(s) URL"},
		{name: "no key", tweak: func(c *Config) { c.APIKey = "" }, wantErr: "API key is required"},
		{name: "no model", tweak: func(c *Config) { c.Model = "" }, wantErr: "default model is required"},
		{name: "negative retries", tweak: func(c *Config) { c.MaxRetries = -1 }, wantErr: "max retries"},
		{name: "negative timeout", tweak: func(c *Config) { c.Timeout = -time.Second }, wantErr: "must not be negative"},
		{name: "max delay below base", tweak: func(c *Config) {
			c.RetryBaseDelay = time.Second
			c.RetryMaxDelay = time.Millisecond
		}, wantErr: "max delay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.tweak(&cfg)
			_, err := New(cfg, nil)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if code := sandchat.ErrorCode(err); code != sandchat.EINVALID || !strings.Contains(sandchat.ErrorMessage(err), tt.wantErr) {
				t.Errorf("New error = %v, want %s containing %q", err, sandchat.EINVALID, tt.wantErr)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		wantOK bool
	}{
		{name: "none", header: http.Header{}},
		{name: "seconds", header: http.Header{"Retry-After": {"3"}}, want: 3 * time.Second, wantOK: true},
		{name: "fractional seconds", header: http.Header{"Retry-After": {"0.5"}}, want: 500 * time.Millisecond, wantOK: true},
		{name: "milliseconds win", header: http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}}, want: 250 * time.Millisecond, wantOK: true},
		{name: "date", header: http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, want: 7 * time.Second, wantOK: true},
		{name: "past date", header: http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, want: 0, wantOK: true},
		{name: "huge", header: http.Header{"Retry-After": {"1e300"}}, want: 24 * time.Hour, wantOK: true},
		{name: "negative", header: http.Header{"Retry-After": {"-1"}}},
		{name: "garbage", header: http.Header{"Retry-After": {"soon"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseRetryAfter(tt.header, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseRetryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// The fake streams calls one after the other, as OpenAI does; these cover the orders
// other servers use, fed to the accumulator directly.
func TestAccumulatorToolCallOrders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks []string // each a delta.tool_calls array
		want   []agents.ToolCall
	}{
		{
			name: "interleaved fragments",
			chunks: []string{
				`[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]`,
				`[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"y\""}}]`,
				`[{"index":0,"function":{"arguments":"{\"x\":"}}]`,
				`[{"index":1,"function":{"arguments":":2}"}},{"index":0,"function":{"arguments":"1}"}}]`,
			},
			want: []agents.ToolCall{
				{ID: "call_a", Name: "f", Arguments: json.RawMessage(`{"x":1}`)},
				{ID: "call_b", Name: "g", Arguments: json.RawMessage(`{"y":2}`)},
			},
		},
		{
			name: "whole calls all under index 0",
			chunks: []string{
				`[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]`,
				`[{"index":0,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]`,
			},
			want: []agents.ToolCall{
				{ID: "call_a", Name: "f", Arguments: json.RawMessage(`{"x":1}`)},
				{ID: "call_b", Name: "g", Arguments: json.RawMessage(`{}`)},
			},
		},
		{
			name: "name repeated, no id",
			chunks: []string{
				`[{"index":0,"function":{"name":"f","arguments":"{\"x\""}}]`,
				`[{"index":0,"function":{"name":"f","arguments":":1}"}}]`,
			},
			want: []agents.ToolCall{{ID: "call_0", Name: "f", Arguments: json.RawMessage(`{"x":1}`)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var acc accumulator
			for _, c := range tt.chunks {
				var calls []oai.ChatCompletionChunkChoiceDeltaToolCall
				if err := json.Unmarshal([]byte(c), &calls); err != nil {
					t.Fatal(err)
				}
				for _, tc := range calls {
					acc.addToolCall(tc)
				}
			}
			assertCompletion(t, acc.completion(), agents.Completion{ToolCalls: tt.want})
		})
	}
}

// TestCompleteReportsUsage: the provider asks for the usage chunk, returns what it
// reports, and counts each attempt by status with its tokens; the bounded model labels
// keep an agent owner's free-text model names from multiplying the series.
func TestCompleteReportsUsage(t *testing.T) {
	t.Parallel()
	p, b := setup(t, nil,
		openaitest.Status{Code: 503},
		openaitest.Reply{Text: "hi", Usage: &openaitest.Usage{PromptTokens: 12, CompletionTokens: 3}})
	comp, _, err := complete(t, t.Context(), p, userHello)
	if err != nil {
		t.Fatal(err)
	}
	if comp.Usage == nil || *comp.Usage != (agents.Usage{PromptTokens: 12, CompletionTokens: 3}) {
		t.Fatalf("usage %+v, want 12 + 3", comp.Usage)
	}
	for i, r := range b.srv.Requests() {
		if !r.IncludeUsage {
			t.Fatalf("request %d does not ask for usage: %s", i, r.Body)
		}
	}
	for _, c := range []struct {
		v    float64
		want float64
	}{
		{testutil.ToFloat64(p.metrics.requests.WithLabelValues("test-model", "http_503")), 1},
		{testutil.ToFloat64(p.metrics.requests.WithLabelValues("test-model", "ok")), 1},
		{testutil.ToFloat64(p.metrics.tokens.WithLabelValues("test-model", "prompt")), 12},
		{testutil.ToFloat64(p.metrics.tokens.WithLabelValues("test-model", "completion")), 3},
	} {
		if c.v != c.want {
			t.Errorf("got %v, want %v", c.v, c.want)
		}
	}
	for i := range maxModelLabels + 5 {
		p.metrics.model(fmt.Sprintf("m%d", i))
	}
	if got := p.metrics.model("one-more"); got != "other" {
		t.Fatalf("model label past the bound: %q, want other", got)
	}
}
