package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// withSpans sends the node's spans to an in-memory exporter.
func withSpans(exp *tracetest.InMemoryExporter) func(*Config, *Main) {
	return func(_ *Config, m *Main) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		m.Tracing = tp
		m.stopTracing = tp.Shutdown
	}
}

// traceOf returns the ended spans of one trace, by name.
func traceOf(exp *tracetest.InMemoryExporter, traceID string) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

func spanNames(spans map[string][]tracetest.SpanStub) []string {
	var names []string
	for n := range spans {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// childOf says whether child's parent is parent.
func childOf(child, parent tracetest.SpanStub) bool {
	return child.Parent.SpanID() == parent.SpanContext.SpanID()
}

// TestTraces: with a tracer provider, a request is a span in its caller's trace (W3C
// traceparent), with the run it makes, the turn it starts, that turn's tool calls and
// their runs, and the Postgres statements and Redis commands they issue, all in one trace.
func TestTraces(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	var logs testenv.Buffer
	m := newEnv(t).sandboxNode(withSpans(exp), withLogs(&logs, slog.LevelInfo), func(c *Config, _ *Main) {
		// One session keeps its process: the next session's run evicts the one before.
		c.Sandbox.Engine.MaxLive = 1
	})
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	send := func(path, traceID string, body any) int {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", alice.base+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+alice.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("a direct run", func(t *testing.T) {
		const id = "4bf92f3577b34da6a3ce929d0e0e4736"
		if code := send(fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), id, map[string]any{"code": "x = 41\nx + 1"}); code != 200 {
			t.Fatalf("run: %d", code)
		}
		var spans map[string][]tracetest.SpanStub
		eventually(t, 10*time.Second, "the request's span ended", func() bool {
			spans = traceOf(exp, id)
			return len(spans["POST /api/v1/conversations/:id/sandbox/executions"]) == 1
		})
		req := spans["POST /api/v1/conversations/:id/sandbox/executions"][0]
		if req.Parent.SpanID().String() != "00f067aa0ba902b7" || !req.Parent.IsRemote() {
			t.Fatalf("the request's span is not a child of its caller's: parent %v", req.Parent)
		}
		run := spans["sandbox run"]
		if len(run) != 1 || !childOf(run[0], req) {
			t.Fatalf("sandbox run spans %v under %v (trace has %v)", run, req.SpanContext.SpanID(), spanNames(spans))
		}
		// The run's log line is found from its trace, and the trace from the line.
		if l := logLines(t, &logs, "msg", "sandbox run", "trace_id", id); len(l) != 1 {
			t.Fatalf("run lines of trace %s: %v", id, l)
		}
		// go-redis names a span after its command; Postgres spans after the statement's verb.
		pg, rd := len(spans["postgres insert"]) > 0, len(spans["evalsha"])+len(spans["hget"]) > 0
		if !pg || !rd {
			t.Fatalf("no Postgres (%v) or Redis (%v) spans in the trace: %v", pg, rd, spanNames(spans))
		}
	})
	t.Run("a run whose session was evicted, down to its restore", func(t *testing.T) {
		// conv ran above; another session's run evicts it (its heap checkpointed
		// first), so its next run brings it back from that heap.
		if r := alice.run(alice.createConversation(agent.ID), "y = 1"); r.Status != "success" {
			t.Fatalf("run %+v", r)
		}
		eventually(t, time.Minute, "the first session to leave memory", func() bool {
			var info struct{ Live bool }
			alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, &info)
			return !info.Live
		})
		const id = "5b8efff798038103d269b633813fc60c"
		if code := send(fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), id, map[string]any{"code": "x"}); code != 200 {
			t.Fatalf("run: %d", code)
		}
		var spans map[string][]tracetest.SpanStub
		eventually(t, 10*time.Second, "the request's span ended", func() bool {
			spans = traceOf(exp, id)
			return len(spans["POST /api/v1/conversations/:id/sandbox/executions"]) == 1
		})
		one := func(name string) tracetest.SpanStub {
			t.Helper()
			if len(spans[name]) != 1 {
				t.Fatalf("%d %q spans in the trace: %v", len(spans[name]), name, spanNames(spans))
			}
			return spans[name][0]
		}
		req, run, restore, admission, execute := one("POST /api/v1/conversations/:id/sandbox/executions"), one("sandbox run"),
			one("sandbox restore"), one("sandbox admission"), one("sandbox execute")
		from := ""
		for _, a := range restore.Attributes {
			if a.Key == "sandchat.restored_from" {
				from = a.Value.AsString()
			}
		}
		if !childOf(run, req) || !childOf(restore, run) || !childOf(admission, restore) || !childOf(execute, run) || from != "snapshot" {
			t.Fatalf("request %s > run %s (parent %s) > restore %s (parent %s, from %q) > admission (parent %s); execute (parent %s)",
				req.SpanContext.SpanID(), run.SpanContext.SpanID(), run.Parent.SpanID(), restore.SpanContext.SpanID(), restore.Parent.SpanID(), from,
				admission.Parent.SpanID(), execute.Parent.SpanID())
		}
		// The eviction checkpointed the heap it came back from: a span of its own trace.
		checkpoints := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "sandbox checkpoint" {
				checkpoints++
			}
		}
		if checkpoints == 0 {
			t.Fatal("no checkpoint span")
		}
	})
	t.Run("a turn, its tool call and its run", func(t *testing.T) {
		const id = "0af7651916cd43dd8448eb211c80319c"
		other := alice.createConversation(agent.ID)
		if code := send(fmt.Sprintf("/api/v1/conversations/%d/messages", other), id, map[string]any{"content": py("print(6 * 7)")}); code != 202 {
			t.Fatalf("message: %d", code)
		}
		var spans map[string][]tracetest.SpanStub
		eventually(t, 90*time.Second, "the turn's span ended", func() bool {
			spans = traceOf(exp, id)
			return len(spans["turn"]) == 1
		})
		req, turn := spans["POST /api/v1/conversations/:id/messages"], spans["turn"][0]
		if len(req) != 1 || !childOf(turn, req[0]) {
			t.Fatalf("turn %v is not under the request %v", turn.Parent, req)
		}
		tool := spans["tool pyodide_sandbox"]
		if len(tool) != 1 || !childOf(tool[0], turn) {
			t.Fatalf("tool spans %v (trace has %v)", tool, spanNames(spans))
		}
		if run := spans["sandbox run"]; len(run) != 1 || !childOf(run[0], tool[0]) {
			t.Fatalf("run spans %v (trace has %v)", run, spanNames(spans))
		}
	})
}

// TestTracingFromEnvironment: traces are off unless OpenTelemetry's standard variable
// names a collector; then spans reach it over OTLP/HTTP, named for the service.
func TestTracingFromEnvironment(t *testing.T) {
	if tracingEnabled() {
		t.Skip("OTEL_EXPORTER_OTLP_ENDPOINT is set for the whole test run")
	}
	e := newEnv(t)
	off := e.node()
	if off.traced() {
		t.Fatal("spans are made with no OTEL_EXPORTER_OTLP_ENDPOINT")
	}

	got := make(chan *coltrace.ExportTraceServiceRequest, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("collector got %s %s (%d bytes) it cannot read", r.Method, r.URL.Path, len(body))
		}
		got <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	on := e.node()
	if !on.traced() {
		t.Fatal("no spans with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	alice, _ := on.user(t, "alice", false)
	alice.must(200, "GET", "/api/v1/me", nil, nil)
	if err := on.Close(); err != nil { // flushes the batch
		t.Fatal(err)
	}
	var names []string
	service := ""
	for len(got) > 0 {
		for _, rs := range (<-got).GetResourceSpans() {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names = append(names, s.GetName())
				}
			}
		}
	}
	if service != "sandchat" || !slices.Contains(names, "GET /api/v1/me") || !slices.Contains(names, "postgres select") {
		t.Fatalf("collector got service %q, spans %v", service, names)
	}
}
