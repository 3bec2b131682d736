package frontendapi

import (
	"strings"
	"testing"
)

// TestNewRefusesMissingDeps: a Server is not built with a service its handlers call
// missing; the error names every one, so a wiring mistake fails at start, not in a
// request.
func TestNewRefusesMissingDeps(t *testing.T) {
	s, err := New(Deps{})
	if err == nil || s != nil {
		t.Fatalf("built without services: %v", err)
	}
	want := "missing Admin, Agents, Catalogue, Conversations, Events, Files, Hub, Log, Messages, Sandbox, Sessions, Tickets, Tools, Turns, Users"
	if !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("error %q, want it to end with %q", err, want)
	}
}
