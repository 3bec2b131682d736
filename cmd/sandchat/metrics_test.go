package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

// metricsURL is where m serves /metrics: its own listener when it has one.
func (m *Main) metricsURL() string {
	if m.metricsLn != nil {
		return "http://" + m.MetricsAddr() + "/metrics"
	}
	return "http://" + m.Addr() + "/metrics"
}

// scrape reads m's /metrics as Prometheus does, over HTTP, and returns its families.
func scrape(t testing.TB, m *Main) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(m.metricsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// series is the value of the series of name whose labels include labels (name, value
// pairs): a counter's or a gauge's value, a histogram's count of observations, summed
// over the series that match; found is false when none does.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, found bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, s := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		found = true
		switch {
		case s.Counter != nil:
			v += s.GetCounter().GetValue()
		case s.Gauge != nil:
			v += s.GetGauge().GetValue()
		case s.Histogram != nil:
			v += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return v, found
}

// metric scrapes m and returns one series (see series); an absent series is 0.
func (m *Main) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	v, _ := series(scrape(t, m), name, labels...)
	return v
}

// awaitMetric waits until the series of name with labels reaches want: what a test
// did is counted once the request that did it answered, or soon after for what ends
// in the background (a turn).
func (m *Main) awaitMetric(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	var got float64
	if _, ok := poll(30*time.Second, func() bool { got = m.metric(t, name, labels...); return got >= want }); !ok {
		t.Fatalf("%s%q = %v, want %v", name, labels, got, want)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestMetricsListener: /metrics is on the public port by default, without the
// profiler; with SANDCHAT_METRICS_ADDR both are on that listener and neither on the
// public port.
func TestMetricsListener(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("public port by default, no profiler", func(t *testing.T) {
		m := e.node()
		fams := scrape(t, m)
		if v, ok := series(fams, "sandchat_build_info", "version", buildVersion()); !ok || v != 1 {
			t.Fatalf("sandchat_build_info{version=%q} = %v, %v", buildVersion(), v, ok)
		}
		if code, _ := get(t, "http://"+m.Addr()+"/debug/pprof/"); code != 404 {
			t.Fatalf("public /debug/pprof/: %d, want 404", code)
		}
	})
	t.Run("a listener of its own", func(t *testing.T) {
		m := e.node(func(c *Config, _ *Main) { c.MetricsAddr = "127.0.0.1:0" })
		for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline"} {
			if code, _ := get(t, "http://"+m.Addr()+path); code != 404 {
				t.Fatalf("public %s: %d, want 404", path, code)
			}
		}
		// The refusals above are counted, and read on the metrics listener.
		if v := m.metric(t, "sandchat_http_requests_total", "route", "unmatched", "status", "404"); v != 3 {
			t.Fatalf("404s counted: %v, want 3", v)
		}
		if code, body := get(t, "http://"+m.MetricsAddr()+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
			t.Fatalf("/debug/pprof/ on the metrics listener: %d %.200s", code, body)
		}
		if code, body := get(t, "http://"+m.MetricsAddr()+"/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
			t.Fatalf("goroutine profile: %d %.200s", code, body)
		}
		// The command line may hold a secret: the profiler does not show it.
		if code, body := get(t, "http://"+m.MetricsAddr()+"/debug/pprof/cmdline"); code == 200 || strings.Contains(body, "sandchat") {
			t.Fatalf("/debug/pprof/cmdline on the metrics listener: %d %.200s", code, body)
		}
	})
}

// TestHTTPDurationReachesRunLimit: the request histogram's buckets reach the longest
// run a request may wait for.
func TestHTTPDurationReachesRunLimit(t *testing.T) {
	t.Parallel()
	m := newEnv(t).node()
	m.as(t, "").must(200, "GET", "/healthz", nil, nil)
	f := scrape(t, m)["sandchat_http_request_duration_seconds"]
	if f == nil || len(f.GetMetric()) == 0 {
		t.Fatal("no sandchat_http_request_duration_seconds")
	}
	b := f.GetMetric()[0].GetHistogram().GetBucket()
	if last := b[len(b)-1].GetUpperBound(); last < 300 {
		t.Fatalf("last bucket %v s, want 300 s (SANDCHAT_SANDBOX_MAX_TIMEOUT's ceiling)", last)
	}
}

// TestVersionFromBuild: `make build` stamps the binary with git describe, which
// --version and sandchat_build_info report instead of devel.
func TestVersionFromBuild(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	describe, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--tags", "--match", "v[0-9]*", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	want := strings.TrimSpace(string(describe))
	plan, err := exec.CommandContext(ctx, "make", "-C", root, "--no-print-directory", "-n", "build").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	line := strings.TrimSpace(string(plan))
	if !strings.Contains(line, "-X main.version="+want) || !strings.Contains(line, "-o bin/sandchat") {
		t.Fatalf("make build runs %q: want -X main.version=%s", line, want)
	}
	bin := filepath.Join(t.TempDir(), "sandchat")
	build := exec.CommandContext(ctx, "bash", "-c", strings.Replace(line, "-o bin/sandchat", "-o "+bin, 1))
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "sandchat "+want+", deno ") {
		t.Fatalf("--version: %q %v, want sandchat %s", out, err, want)
	}
	_ = os.Remove(bin)
}

// TestTurnAndLimitMetrics: turns are counted by how they ended, rate limits by the
// action they refused, and an upload the quota refuses by what it refused, each read
// from /metrics after doing it.
func TestTurnAndLimitMetrics(t *testing.T) {
	t.Parallel()
	m := newEnv(t).node(func(c *Config, _ *Main) {
		c.RateMessages, c.RateLogins, c.ConversationQuota = 2, 1, 1<<20
	})
	alice, _ := m.user(t, "alice", false)

	t.Run("turns by status", func(t *testing.T) {
		conv := alice.createConversation(0)
		if tj := alice.finishTurn(conv, alice.post(conv, "hello")); tj.Status != "completed" {
			t.Fatalf("turn %+v", tj)
		}
		m.awaitMetric(t, 1, "sandchat_turns_total", "status", "completed")
		// A model no endpoint serves fails the turn.
		agent := alice.createAgent(map[string]any{"name": "Remote", "model": "gpt-none"})
		other := alice.createConversation(agent.ID)
		if tj := alice.finishTurn(other, alice.post(other, "hello")); tj.Status != "failed" {
			t.Fatalf("turn %+v", tj)
		}
		m.awaitMetric(t, 1, "sandchat_turns_total", "status", "failed")
	})
	t.Run("rate limits by action", func(t *testing.T) {
		conv := alice.createConversation(0)
		// Two messages were allowed this minute; the third is refused, whatever the first
		// two did (the minute may turn between them: then the refusal comes later).
		for refused := false; !refused; {
			code := alice.do("POST", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), map[string]any{"content": "hi"}, nil)
			refused = code == 429
		}
		if v := m.metric(t, "sandchat_rate_limited_total", "action", "messages"); v < 1 {
			t.Fatalf("messages refused: %v", v)
		}
		anon := m.as(t, "")
		for refused := false; !refused; {
			refused = anon.do("POST", "/api/v1/auth/login", map[string]any{"token": "scl_wrong"}, nil) == 429
		}
		if v := m.metric(t, "sandchat_rate_limited_total", "action", "logins"); v < 1 {
			t.Fatalf("logins refused: %v", v)
		}
	})
	t.Run("an upload past the quota", func(t *testing.T) {
		conv := alice.createConversation(0)
		if code, body := alice.uploadAt(conv, "big.bin", "", strings.Repeat("b", 3<<19)); code != 413 {
			t.Fatalf("upload past a 1 MiB quota: %d %s", code, body)
		}
		if v := m.metric(t, "sandchat_quota_refusals_total", "what", "upload"); v != 1 {
			t.Fatalf("upload refusals: %v, want 1", v)
		}
	})
}

// TestLLMUsage: each turn keeps the tokens its model calls used, summed over its steps,
// and returns them with the turn; /metrics counts every request to the endpoint (a
// retried one too) by model and status, their tokens and their durations.
func TestLLMUsage(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t,
		// turn 1: a 500, retried, then an answer
		openaitest.Status{Code: 500},
		openaitest.Reply{Text: "hello", Usage: &openaitest.Usage{PromptTokens: 100, CompletionTokens: 7}},
		// turn 2: a call to a tool that is off, refused, then an answer
		openaitest.Reply{ToolCalls: []openaitest.Call{{Name: "pyodide_sandbox", Arguments: `{"code":"1"}`}},
			Usage: &openaitest.Usage{PromptTokens: 50, CompletionTokens: 5}},
		openaitest.Reply{Text: "done", Usage: &openaitest.Usage{PromptTokens: 60, CompletionTokens: 6}},
	)
	m := newEnv(t).node(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model", MaxRetries: 1}
	})
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Chatty", "model": "fake-model"})
	conv := alice.createConversation(agent.ID)
	usage := func(turn int64) (int64, int64) {
		t.Helper()
		tj := alice.finishTurn(conv, turn)
		if tj.Status != "completed" || tj.Usage == nil {
			t.Fatalf("turn %+v", tj)
		}
		return tj.Usage.PromptTokens, tj.Usage.CompletionTokens
	}
	if p, c := usage(alice.post(conv, "hi")); p != 100 || c != 7 {
		t.Fatalf("turn 1 used %d + %d tokens, want 100 + 7", p, c)
	}
	if p, c := usage(alice.post(conv, "run 1")); p != 110 || c != 11 {
		t.Fatalf("turn 2 used %d + %d tokens, want 110 + 11 (its two steps)", p, c)
	}
	for i, r := range srv.Requests() {
		if !r.IncludeUsage {
			t.Fatalf("request %d does not ask for usage: %s", i, r.Body)
		}
	}
	fams := scrape(t, m)
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sandchat_llm_requests_total", []string{"model", "fake-model", "status", "http_500"}, 1},
		{"sandchat_llm_requests_total", []string{"model", "fake-model", "status", "ok"}, 3},
		{"sandchat_llm_tokens_total", []string{"model", "fake-model", "kind", "prompt"}, 210},
		{"sandchat_llm_tokens_total", []string{"model", "fake-model", "kind", "completion"}, 18},
		{"sandchat_llm_request_duration_seconds", []string{"model", "fake-model"}, 4},
		{"sandchat_turns_total", []string{"status", "completed"}, 2},
	} {
		if v, _ := series(fams, s.name, s.labels...); v != s.want {
			t.Errorf("%s%q = %v, want %v", s.name, s.labels, v, s.want)
		}
	}

	t.Run("the builtin model reports none", func(t *testing.T) {
		other := alice.createConversation(alice.createAgent(map[string]any{"name": "Offline", "model": "builtin"}).ID)
		if tj := alice.finishTurn(other, alice.post(other, "hello")); tj.Status != "completed" || tj.Usage != nil {
			t.Fatalf("builtin turn %+v: want no usage", tj)
		}
	})
}
