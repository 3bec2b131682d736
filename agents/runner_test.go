package agents

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// TestNewRunner: a Runner is refused without the parts a turn calls, naming each one,
// and gets the documented defaults for what is left zero.
func TestNewRunner(t *testing.T) {
	full := func() RunnerDeps {
		return RunnerDeps{
			Store: struct{ TurnStore }{}, Agents: struct{ AgentLoader }{},
			Catalogue: toolkits.NewCatalogue(nil, nil),
			Tools:     toolkits.NewTools(&toolkits.Sandbox{}, func() sandbox.StatusLimits { return sandbox.StatusLimits{} }, ""),
			Providers: func(*Agent) (Provider, error) { return Builtin{}, nil },
			Events:    struct{ conversations.Publisher }{}, Cancels: struct{ CancelBus }{},
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), NodeID: "n1",
		}
	}
	cases := []struct {
		name    string
		change  func(*RunnerDeps)
		missing string
	}{
		{"complete", func(*RunnerDeps) {}, ""},
		{"no store", func(d *RunnerDeps) { d.Store = nil }, "Store"},
		{"no tools nor node id", func(d *RunnerDeps) { d.Tools, d.NodeID = nil, "" }, "NodeID, Tools"},
		{"no providers", func(d *RunnerDeps) { d.Providers = nil }, "Providers"},
		{"no log", func(d *RunnerDeps) { d.Log = nil }, "Log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := full()
			tc.change(&d)
			r, err := NewRunner(d)
			if tc.missing == "" {
				if err != nil || r == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.HasSuffix(err.Error(), "missing "+tc.missing) {
				t.Fatalf("error %v, want one naming %s", err, tc.missing)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		r, err := NewRunner(full())
		if err != nil {
			t.Fatal(err)
		}
		if r.maxSteps != 12 || r.maxDepth != 3 || r.staleAfter != 30*time.Second || r.nodeTTL != 3*time.Second ||
			r.quietAfter != 4*time.Second || r.writeRetry != 15*time.Second || r.finishRetry != 10*time.Minute {
			t.Fatalf("defaults %+v", r)
		}
	})
	t.Run("quiet never longer than stale", func(t *testing.T) {
		d := full()
		d.StaleAfter, d.QuietAfter = 2*time.Second, time.Minute
		r, err := NewRunner(d)
		if err != nil || r.quietAfter != 2*time.Second {
			t.Fatalf("quietAfter %v, %v", r.quietAfter, err)
		}
	})
}
