package main

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// withLogs sends the node's logs, from level on, to buf as JSON lines as well as to the test's log.
func withLogs(buf *testenv.Buffer, level slog.Level) func(*Config, *Main) {
	return func(c *Config, m *Main) {
		c.LogLevel, c.LogFormat = strings.ToLower(level.String()), "json"
		m.Log = newLogger(*c, buf)
	}
}

// linesWith returns the log lines in buf whose text matches re.
func linesWith(buf *testenv.Buffer, re string) []string {
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if regexp.MustCompile(re).MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// TestRunLogLine: each run writes one line at info with how it went, where its
// interpreter came from and how long it took.
func TestRunLogLine(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	m := newEnv(t).sandboxNode(withLogs(&logs, slog.LevelInfo))
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	if r := alice.run(conv, "x = 41\nx + 1"); r.Status != "success" {
		t.Fatalf("run %+v", r)
	}
	if r := alice.run(conv, "1 / 0"); r.Status != "error" {
		t.Fatalf("run %+v", r)
	}
	lines := linesWith(&logs, `"msg":"sandbox run"`)
	if len(lines) != 2 || !regexp.MustCompile(`"level":"INFO".*"status":"success","from":"fresh".*"total_ms":\d+`).MatchString(lines[0]) ||
		!regexp.MustCompile(`"status":"error","from":"live"`).MatchString(lines[1]) {
		t.Fatalf("run lines:\n%s", strings.Join(lines, "\n"))
	}
}
