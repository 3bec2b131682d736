package openaitest_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

// recorder keeps the failures a Server reports instead of failing the test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func post(t *testing.T, srv *openaitest.Server, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

const hello = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestServer(t *testing.T) {
	t.Parallel()
	t.Run("streams SSE chunks then DONE", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Text: "Hello, world", ToolCalls: []openaitest.Call{{Name: "f", Arguments: `{"a":1}`}}})
		res := post(t, srv, srv.APIKey, hello)
		if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d, content type %q", res.StatusCode, ct)
		}
		var contents, args []string
		var lines []string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines = append(lines, sc.Text())
			}
		}
		for _, l := range lines[:len(lines)-1] {
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content   string `json:"content"`
						ToolCalls []struct {
							Function struct{ Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &chunk); err != nil {
				t.Fatalf("chunk %q: %v", l, err)
			}
			if d := chunk.Choices[0].Delta; d.Content != "" {
				contents = append(contents, d.Content)
			} else if len(d.ToolCalls) > 0 && d.ToolCalls[0].Function.Arguments != "" {
				args = append(args, d.ToolCalls[0].Function.Arguments)
			}
		}
		if last := lines[len(lines)-1]; last != "data: [DONE]" {
			t.Errorf("last line = %q, want data: [DONE]", last)
		}
		if len(contents) < 2 || strings.Join(contents, "") != "Hello, world" {
			t.Errorf("content deltas = %q, want several making %q", contents, "Hello, world")
		}
		if len(args) < 2 || strings.Join(args, "") != `{"a":1}` {
			t.Errorf("argument fragments = %q, want several making %q", args, `{"a":1}`)
		}
	})

	t.Run("status with an OpenAI error body", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Status{Code: 429, RetryAfter: "1"})
		res := post(t, srv, srv.APIKey, hello)
		var body struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" || body.Error.Code != "rate_limit_exceeded" || body.Error.Message == "" {
			t.Errorf("got %d Retry-After=%q body %+v", res.StatusCode, res.Header.Get("Retry-After"), body.Error)
		}
	})

	t.Run("wrong key gets 401 and keeps the step", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Text: "x"})
		if res := post(t, srv, "sk-wrong", hello); res.StatusCode != 401 {
			t.Errorf("status = %d, want 401", res.StatusCode)
		}
		if srv.Remaining() != 1 || len(srv.Requests()) != 1 || srv.Requests()[0].Authorized {
			t.Errorf("remaining %d, requests %+v", srv.Remaining(), srv.Requests())
		}
	})

	t.Run("tool message without its call gets 400", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Text: "x"})
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"1"}]}`
		if res := post(t, srv, srv.APIKey, body); res.StatusCode != 400 {
			t.Errorf("status = %d, want 400", res.StatusCode)
		}
	})

	t.Run("unanswered tool call gets 400", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Text: "x"})
		body := `{"model":"m","stream":true,"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"hi"}]}`
		if res := post(t, srv, srv.APIKey, body); res.StatusCode != 400 {
			t.Errorf("status = %d, want 400", res.StatusCode)
		}
	})

	t.Run("request beyond the script fails the test", func(t *testing.T) {
		rec := &recorder{TB: t}
		srv := openaitest.New(rec, openaitest.Reply{Text: "x"})
		post(t, srv, srv.APIKey, hello)
		if res := post(t, srv, srv.APIKey, hello); res.StatusCode != 400 {
			t.Errorf("status = %d, want 400", res.StatusCode)
		}
		if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "after all 1 scripted steps") {
			t.Errorf("reported failures = %q, want one about the script", rec.errs)
		}
	})

	t.Run("decodes what it was sent", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Text: "x"})
		body := `{"model":"m","stream":true,"messages":[
			{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"out"}],
			"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]}`
		post(t, srv, srv.APIKey, body)
		got := srv.Requests()[0]
		want := []openaitest.Message{
			{Role: "user", Content: "ab"},
			{Role: "assistant", ToolCalls: []openaitest.Call{{ID: "c1", Name: "f", Arguments: "{}"}}},
			{Role: "tool", ToolCallID: "c1", Content: "out"},
		}
		if fmt.Sprint(got.Messages) != fmt.Sprint(want) {
			t.Errorf("messages = %+v, want %+v", got.Messages, want)
		}
		if len(got.Tools) != 1 || got.Tools[0].Name != "f" || got.Tools[0].Description != "d" || string(got.Tools[0].Parameters) != `{"type":"object"}` {
			t.Errorf("tools = %+v", got.Tools)
		}
	})
}
