package sandbox

import (
	"log/slog"
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
