package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestPipRestoreRecord: a saved session's micropip record comes back as it decodes,
// even in part, and is kept when installing is off (the next save must not erase it).
func TestPipRestoreRecord(t *testing.T) {
	env := &Env{Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	for _, c := range []struct {
		name, raw string
		kept      int
		note      bool
	}{
		{"none", ``, 0, false},
		{"empty", `[]`, 0, false},
		{"two wheels, installing off", `[{"name":"a","version":"1"},{"name":"b","version":"2"}]`, 2, true},
		{"partly readable", `[{"name":"a","version":"1"},{"name":7}]`, 2, true},
	} {
		got, wheels, notes := env.restorePip(ctx, nil, "k", json.RawMessage(c.raw))
		if got == nil || len(got) != 0 {
			t.Errorf("%s: wheels for the process %v, want [] (none fetched without a fetcher)", c.name, got)
		}
		if len(wheels) != c.kept {
			t.Errorf("%s: kept %d wheels, want %d", c.name, len(wheels), c.kept)
		}
		if hasNote := len(notes) == 1 && strings.Contains(notes[0], "installing is turned off"); hasNote != c.note {
			t.Errorf("%s: notes %q", c.name, notes)
		}
	}
}
