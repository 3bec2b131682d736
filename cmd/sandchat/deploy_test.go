package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

// metricName finds the metric names a PromQL expression or a text names.
var metricName = regexp.MustCompile(`\b(?:sandchat|go|process)_[a-z_]+\b`)

// exprs collects every "expr" of a Grafana dashboard, panels within rows included.
func exprs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				out = append(out, s)
			} else {
				out = append(out, exprs(e)...)
			}
		}
	case []any:
		for _, e := range x {
			out = append(out, exprs(e)...)
		}
	}
	return out
}

// TestDeployedDashboardAndAlerts: the dashboard is valid JSON whose every query names
// metrics a fully wired node exports (the engine's and the model's included), and it
// draws every metric the alert rules watch; the rules name only metrics that exist too.
// promtool checks and tests the rules themselves (`make rules`).
func TestDeployedDashboardAndAlerts(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	e := newEnv(t)
	m := e.node(withEngine(e.redisPrefix), func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model"}
	})
	known := map[string]bool{}
	descs := make(chan *prometheus.Desc, 1000)
	for _, c := range m.collectors {
		c.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if n := fqName.FindStringSubmatch(d.String()); n != nil {
			known[n[1]] = true
		}
	}
	exists := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
				return true
			}
		}
		return false
	}

	raw, err := os.ReadFile("../../deploy/grafana/sandchat.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/sandchat.json is not JSON: %v", err)
	}
	drawn := map[string]bool{}
	queries := exprs(dash)
	if len(queries) < 10 {
		t.Fatalf("%d queries in the dashboard", len(queries))
	}
	for _, q := range queries {
		names := metricName.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("dashboard query names no metric: %s", q)
		}
		for _, n := range names {
			drawn[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
			if !exists(n) {
				t.Errorf("dashboard query names %s, which no node exports: %s", n, q)
			}
		}
	}

	// Each query parses as PromQL: promtool checks them as recording rules, with the
	// dashboard's node variable filled in.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: ./.ci/services installs it (Debian's prometheus package)")
	}
	var recorded strings.Builder
	recorded.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries {
		expr, _ := json.Marshal(strings.ReplaceAll(q, "$instance", ".*")) // a JSON string is a YAML string
		fmt.Fprintf(&recorded, "      - record: dashboard:query%d\n        expr: %s\n", i, expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(file, []byte(recorded.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries do not parse: %v\n%s", err, out)
	}

	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	watched := slices.Compact(slices.Sorted(slices.Values(metricName.FindAllString(string(rules), -1))))
	if len(watched) < 5 {
		t.Fatalf("alerts name %v", watched)
	}
	for _, n := range watched {
		if !exists(n) {
			t.Errorf("alerts.yml names %s, which no node exports", n)
		}
		if base := strings.TrimSuffix(n, "_count"); !drawn[base] {
			t.Errorf("alerts.yml watches %s, which the dashboard does not draw", n)
		}
	}
}
