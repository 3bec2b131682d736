package session

import (
	"slices"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

// TestReplayable: replay takes the successful runs since the last expiry of the
// session, and nothing when the session is expired now.
func TestReplayable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	run := func(code, status string, ago time.Duration) sandchat.SessionRun {
		return sandchat.SessionRun{Code: code, Status: status, StartedAt: now.Add(-ago), FinishedAt: now.Add(-ago + time.Second)}
	}
	cases := []struct {
		name string
		runs []sandchat.SessionRun
		ttl  time.Duration
		want []string
	}{
		{"no runs", nil, time.Hour, nil},
		{"successful runs in order, failed ones left out",
			[]sandchat.SessionRun{run("a = 1", "success", 30*time.Minute), run("1/0", "error", 20*time.Minute), run("b = a", "success", 10*time.Minute)},
			time.Hour, []string{"a = 1", "b = a"}},
		{"a gap longer than the TTL: the session had expired there",
			[]sandchat.SessionRun{run("a = 1", "success", 5*time.Hour), run("b = 2", "success", 50*time.Minute), run("c = 3", "success", 40*time.Minute)},
			time.Hour, []string{"b = 2", "c = 3"}},
		{"expired now: start fresh",
			[]sandchat.SessionRun{run("a = 1", "success", 3*time.Hour)}, time.Hour, nil},
		{"no TTL keeps everything",
			[]sandchat.SessionRun{run("a = 1", "success", 500*time.Hour), run("b = 2", "timeout", time.Hour)}, 0, []string{"a = 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := replayable(tc.runs, tc.ttl, now); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
