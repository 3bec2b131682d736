package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestAvailability: the engine's state goes down and up with its reasons until it is
// shut down; after that, nothing (a start retry still in flight, say) brings it back or
// replaces the reason.
func TestAvailability(t *testing.T) {
	a := &availability{log: slog.New(slog.DiscardHandler), reason: "starting"}
	if ok, why := a.get(); ok || why != "starting" {
		t.Fatalf("new: %v %q", ok, why)
	}
	if err := a.up(); err != nil {
		t.Fatal(err)
	}
	if ok, why := a.get(); !ok || why != "" {
		t.Fatalf("up: %v %q", ok, why)
	}
	a.down("redis is away")
	if ok, why := a.get(); ok || why != "redis is away" {
		t.Fatalf("down: %v %q", ok, why)
	}
	if !a.shut() || a.shut() {
		t.Fatal("shut must report true once")
	}
	a.down("sandbox failed to start (retrying): engine closed")
	if err := a.up(); err == nil {
		t.Fatal("a shut-down engine came back up")
	}
	if ok, why := a.get(); ok || why != "the sandbox engine is shut down" || !a.isClosed() {
		t.Fatalf("after shut: %v %q", ok, why)
	}
}

// TestPipRestoreRecord: a saved session's micropip record comes back as it decodes,
// even in part, and is kept when installing is off (the next save must not erase it).
func TestPipRestoreRecord(t *testing.T) {
	ps := &pipService{cfg: &Config{}, log: slog.New(slog.DiscardHandler)}
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
		got, wheels, notes := ps.restore(ctx, nil, "k", json.RawMessage(c.raw))
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
