package main

import (
	"fmt"
	"strings"
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

// TestRunFiles: a file written to /tmp is named as not kept, in the run's stderr; a PNG
// the code saved and displayed is one file, which the displayed item shows.
func TestRunFiles(t *testing.T) {
	t.Parallel()
	_, alice, conv := newEnv(t).coder()
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	t.Run("outside the working directory", func(t *testing.T) {
		r := alice.run(conv, `open("/tmp/scratch.csv", "w").write("a,b\n")
open("kept.csv", "w").write("a,b\n")`)
		if r.Status != "success" || len(r.Artifacts) != 1 || r.Artifacts[0].Name != "kept.csv" {
			t.Fatalf("run: %+v", r)
		}
		if !strings.Contains(r.Stderr, "[sandbox] not kept: /tmp/scratch.csv (only files in the working directory /home/pyodide are kept") {
			t.Errorf("stderr does not name the file that was not kept: %q", r.Stderr)
		}
		if r := alice.run(conv, `print(1)`); strings.Contains(r.Stderr, "not kept") {
			t.Errorf("a run that wrote nothing to /tmp: %q", r.Stderr)
		}
	})
	t.Run("saved and displayed", func(t *testing.T) {
		var r struct {
			runJSON
			Displays []displayJSON
		}
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": `from IPython.display import Image
open("chart.png", "wb").write(make_png(30, 20))
display(Image(filename="chart.png"))`}, &r)
		if r.Status != "success" || len(r.Displays) != 1 || r.Displays[0].Image == nil {
			t.Fatalf("run: %+v", r)
		}
		if len(r.Artifacts) != 1 || r.Artifacts[0].Name != "chart.png" || r.Displays[0].Image.FileID != r.Artifacts[0].ID {
			t.Errorf("artifacts %+v, displayed image %+v: want chart.png once, shown by the item", r.Artifacts, r.Displays[0].Image)
		}
		if files := alice.files(conv); len(files) != 2 { // kept.csv and chart.png
			t.Errorf("conversation files: %+v", files)
		}
	})
}
