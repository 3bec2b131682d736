package main

import (
	"fmt"
	"testing"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// orderedRun prints, shows, prints to stderr, shows, and prints again: a page draws the
// text and the items in that order only if the run says where each item came.
const orderedRun = `import sys
print("first line")
display(Table())
print("warned", file=sys.stderr)
print("second ✓")
display(Picture())
print("last line")`

// TestDisplayOrder: each display item of a run is recorded with the bytes of stdout and
// stderr written before it, in the answer, in the stored run a reloaded page reads, and
// in the tool.completed and tool.display events of a turn.
func TestDisplayOrder(t *testing.T) {
	t.Parallel()
	_, alice, conv := newEnv(t).coder()
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	type at struct{ Stdout, Stderr int }
	type run struct {
		ID       int64
		Status   string
		Stdout   string
		Stderr   string
		Displays []struct {
			Kind string
			At   *at
		}
	}
	// Each item must come after exactly the text printed before it.
	want := []struct{ stdout, stderr string }{
		{"first line\n", ""},
		{"first line\nsecond ✓\n", "warned\n"},
	}
	check := func(t *testing.T, r run) {
		t.Helper()
		if r.Status != "success" || r.Stdout != "first line\nsecond ✓\nlast line\n" || r.Stderr != "warned\n" || len(r.Displays) != 2 {
			t.Fatalf("run: %+v", r)
		}
		for i, d := range r.Displays {
			if d.At == nil {
				t.Fatalf("display %d has no place in the output", i)
			}
			if d.At.Stdout > len(r.Stdout) || d.At.Stderr > len(r.Stderr) {
				t.Fatalf("display %d at %+v, past the output", i, *d.At)
			}
			if got := r.Stdout[:d.At.Stdout]; got != want[i].stdout {
				t.Errorf("display %d comes after stdout %q, want %q", i, got, want[i].stdout)
			}
			if got := r.Stderr[:d.At.Stderr]; got != want[i].stderr {
				t.Errorf("display %d comes after stderr %q, want %q", i, got, want[i].stderr)
			}
		}
	}

	var answered run
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": orderedRun}, &answered)
	t.Run("answer", func(t *testing.T) { check(t, answered) })
	t.Run("stored", func(t *testing.T) {
		var stored run
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions/%d", conv, answered.ID), nil, &stored)
		check(t, stored)
		var list []run
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), nil, &list)
		if len(list) != 2 {
			t.Fatalf("%d runs", len(list))
		}
		check(t, list[1])
	})
}
