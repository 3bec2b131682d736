// Package openaitest is a scripted Chat Completions server for tests. It speaks real
// HTTP and real SSE, answers each request with the next step of its script, and
// records what it was sent, so a test can drive a provider (or a whole turn loop)
// through an exact sequence of model answers and then check what the model was shown.
//
//	srv := openaitest.New(t,
//		openaitest.Reply{ToolCalls: []openaitest.Call{{Name: "pyodide_sandbox", Arguments: `{"code":"x=1"}`}}},
//		openaitest.Status{Code: 429},
//		openaitest.Reply{Text: "x is 1"},
//	)
//	// point the provider at srv.URL with srv.APIKey, run, then inspect srv.Requests().
package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// APIKey is the bearer key every Server accepts; any other key gets a 401 that does
// not consume a step, like the real API.
const APIKey = "sk-openaitest"

// Step is one scripted answer: a Reply or a Status.
type Step interface{ step() }

// Reply is a successful streamed answer. Text is streamed in up to three deltas (its
// runes split in near-equal thirds); each tool call streams its id and name first,
// then its arguments in up to three fragments. Calls are indexed in order, as the real
// API does for parallel calls.
type Reply struct {
	Text      string
	ToolCalls []Call
	// Stall keeps the stream open after the content, without finishing it, until the
	// client goes away: the way to test cancellation and idle timeouts.
	Stall bool
	// Usage is what the answer's last chunk reports when the request asked for it
	// (stream_options.include_usage), as the real API does; nil: a count of its own,
	// one token per four bytes of the messages sent and of the answer, at least one each.
	Usage *Usage
}

// Usage is a streamed answer's token usage.
type Usage struct {
	PromptTokens, CompletionTokens int64
}

// Call is a tool call, as scripted in a Reply and as decoded from an assistant
// message in a Request. An empty ID in a Reply becomes "call_<request>_<index>".
type Call struct {
	ID        string
	Name      string
	Arguments string
}

// Status is a failed answer with an OpenAI-shaped error body. Zero fields get the
// values the real API uses for that status.
type Status struct {
	Code    int
	Message string
	Type    string
	ErrCode string // the body's error.code, e.g. "insufficient_quota"
	// RetryAfter, when set, is sent as the Retry-After header (seconds or a date).
	RetryAfter string
}

func (Reply) step()  {}
func (Status) step() {}

// Request is a request the server received, decoded.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
	Stream   bool
	// IncludeUsage says the request asked for the usage chunk.
	IncludeUsage bool
	// Body is the raw JSON, for fields the decoded form leaves out.
	Body []byte
	// Authorized is false when the bearer key was wrong or missing.
	Authorized bool
}

// Message is one message of a Request. Content is the text, whether it was sent as a
// string or as text parts.
type Message struct {
	Role       string
	Content    string
	Name       string
	ToolCalls  []Call
	ToolCallID string
}

// Tool is a function tool offered in a Request.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Server is a running fake endpoint; it is closed by the test's cleanup.
type Server struct {
	// URL is the base URL to configure a client with (it ends in /v1).
	URL    string
	APIKey string

	t    testing.TB
	done chan struct{}

	mu       sync.Mutex
	script   []Step
	scripted int
	requests []Request
}

// New starts a server that answers successive chat completion requests with steps.
// A request beyond the script fails the test and gets a 400.
func New(t testing.TB, steps ...Step) *Server {
	t.Helper()
	s := &Server{APIKey: APIKey, t: t, done: make(chan struct{}), script: steps, scripted: len(steps)}
	hs := httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = hs.URL + "/v1"
	t.Cleanup(func() {
		// Releases stalled streams, which would otherwise keep Close waiting.
		close(s.done)
		hs.Close()
	})
	return s
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Remaining returns how many scripted steps have not been used.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		s.t.Errorf("openaitest: unexpected %s %s", r.Method, r.URL.Path)
		writeError(w, Status{Code: http.StatusNotFound, Message: "Unknown request URL: " + r.Method + " " + r.URL.Path})
		return
	}
	req, err := decodeRequest(r)
	if err != nil {
		s.t.Errorf("openaitest: %v", err)
		writeError(w, Status{Code: http.StatusBadRequest, Message: err.Error()})
		return
	}
	if !req.Stream {
		s.t.Errorf("openaitest: request without \"stream\": true; only streaming is served")
	}
	req.Authorized = r.Header.Get("Authorization") == "Bearer "+s.APIKey

	s.mu.Lock()
	s.requests = append(s.requests, req)
	n := len(s.requests)
	var next Step
	if req.Authorized && len(s.script) > 0 {
		next, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()

	switch {
	case !req.Authorized:
		writeError(w, Status{Code: http.StatusUnauthorized})
	case next == nil:
		s.t.Errorf("openaitest: request %d came after all %d scripted steps were used", n, s.scripted)
		writeError(w, Status{Code: http.StatusBadRequest, Message: "openaitest: unscripted request"})
	default:
		if msg := checkConversation(req.Messages); msg != "" {
			// The real API refuses these too; a turn loop that builds them is wrong.
			writeError(w, Status{Code: http.StatusBadRequest, Message: msg})
			return
		}
		switch step := next.(type) {
		case Status:
			writeError(w, step)
		case Reply:
			s.stream(w, r, n, req, step)
		}
	}
}

func decodeRequest(r *http.Request) (Request, error) {
	var wire struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []wireMessage `json:"messages"`
		Tools    []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return Request{}, fmt.Errorf("reading the request body: %v", err)
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return Request{}, fmt.Errorf("request body is not JSON: %v", err)
	}
	req := Request{Model: wire.Model, Stream: wire.Stream, IncludeUsage: wire.StreamOptions.IncludeUsage, Body: body}
	for _, m := range wire.Messages {
		msg := Message{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID}
		if err := m.Content.decode(&msg.Content); err != nil {
			return Request{}, err
		}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, Call{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, tool := range wire.Tools {
		if tool.Type != "function" {
			return Request{}, fmt.Errorf("tool of type %q, want function", tool.Type)
		}
		req.Tools = append(req.Tools, Tool{Name: tool.Function.Name, Description: tool.Function.Description, Parameters: tool.Function.Parameters})
	}
	return req, nil
}

type wireMessage struct {
	Role      string      `json:"role"`
	Content   wireContent `json:"content"`
	Name      string      `json:"name"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// wireContent is a message's content: a string, null, or a list of parts.
type wireContent json.RawMessage

func (c *wireContent) UnmarshalJSON(b []byte) error {
	*c = append((*c)[:0], b...)
	return nil
}

func (c wireContent) decode(dst *string) error {
	if len(c) == 0 || string(c) == "null" {
		return nil
	}
	if json.Unmarshal(c, dst) == nil {
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return fmt.Errorf("message content is neither a string nor a list of parts: %s", c)
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	*dst = sb.String()
	return nil
}

// checkConversation applies the real API's rule on tool messages: every tool call of
// an assistant message is answered by a tool message right after it, and a tool
// message answers a call of the assistant message before it.
func checkConversation(msgs []Message) string {
	pending := map[string]bool{}
	for i, m := range msgs {
		if m.Role == "tool" {
			if !pending[m.ToolCallID] {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[%d], tool_call_id %q).", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (messages[%d]).", i)
		}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
	}
	return ""
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, n int, req Request, reply Reply) {
	model := req.Model
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	id := fmt.Sprintf("chatcmpl-openaitest-%d", n)
	write := func(chunk map[string]any) {
		chunk["id"], chunk["object"], chunk["created"], chunk["model"] = id, "chat.completion.chunk", time.Now().Unix(), model
		if req.IncludeUsage {
			if _, ok := chunk["usage"]; !ok {
				chunk["usage"] = nil // every chunk but the last, as the real API sends them
			}
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send := func(delta map[string]any, finish any) {
		write(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}})
	}

	send(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, part := range thirds(reply.Text) {
		send(map[string]any{"content": part}, nil)
	}
	for i, c := range reply.ToolCalls {
		callID := c.ID
		if callID == "" {
			callID = fmt.Sprintf("call_%d_%d", n, i)
		}
		send(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": callID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""},
		}}}, nil)
		for _, part := range thirds(c.Arguments) {
			send(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": part},
			}}}, nil)
		}
	}
	if reply.Stall {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	send(map[string]any{}, finish)
	if req.IncludeUsage {
		u := reply.Usage
		if u == nil {
			u = &Usage{PromptTokens: tokens(req.Body), CompletionTokens: tokens([]byte(reply.Text))}
			for _, c := range reply.ToolCalls {
				u.CompletionTokens += tokens([]byte(c.Name + c.Arguments))
			}
		}
		write(map[string]any{"choices": []any{}, "usage": map[string]any{
			"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens,
		}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// tokens is the fake's token count: one per four bytes, at least one.
func tokens(b []byte) int64 { return max(1, int64(len(b)+3)/4) }

// thirds splits s into up to three pieces of near-equal rune counts.
func thirds(s string) []string {
	runes := []rune(s)
	if len(runes) == 0 {
		return nil
	}
	size := (len(runes) + 2) / 3
	var parts []string
	for len(runes) > 0 {
		k := min(size, len(runes))
		parts = append(parts, string(runes[:k]))
		runes = runes[k:]
	}
	return parts
}

var defaultErrors = map[int]Status{
	http.StatusBadRequest:          {Message: "Invalid request.", Type: "invalid_request_error"},
	http.StatusUnauthorized:        {Message: "Incorrect API key provided: sk-op*******test.", Type: "invalid_request_error", ErrCode: "invalid_api_key"},
	http.StatusForbidden:           {Message: "You are not allowed to sample from this model.", Type: "invalid_request_error"},
	http.StatusNotFound:            {Message: "The model does not exist or you do not have access to it.", Type: "invalid_request_error", ErrCode: "model_not_found"},
	http.StatusTooManyRequests:     {Message: "Rate limit reached for requests.", Type: "requests", ErrCode: "rate_limit_exceeded"},
	http.StatusInternalServerError: {Message: "The server had an error while processing your request.", Type: "server_error"},
	http.StatusServiceUnavailable:  {Message: "The engine is currently overloaded, please try again later.", Type: "server_error"},
}

func writeError(w http.ResponseWriter, st Status) {
	def := defaultErrors[st.Code]
	if st.Message == "" {
		st.Message = def.Message
		if st.Message == "" {
			st.Message = http.StatusText(st.Code)
		}
	}
	if st.Type == "" {
		st.Type = def.Type
	}
	if st.ErrCode == "" {
		st.ErrCode = def.ErrCode
	}
	var code any
	if st.ErrCode != "" {
		code = st.ErrCode
	}
	if st.RetryAfter != "" {
		w.Header().Set("Retry-After", st.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.Code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": st.Message, "type": st.Type, "param": nil, "code": code,
	}})
}
