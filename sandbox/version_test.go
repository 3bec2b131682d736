package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// TestBuildIDCoversTheWorker: a change to any module the Worker runs, or to the driver,
// makes a new build (a base snapshot and saved heaps are only valid for the code that
// shaped them); a change to the control thread alone does not, so it costs no session
// its saved heap.
func TestBuildIDCoversTheWorker(t *testing.T) {
	cfg := testConfig("unused")
	requireRuntime(t, cfg)
	dir := t.TempDir()
	for _, f := range proc.RuntimeSources(cfg.RuntimeDir) {
		rel, _ := filepath.Rel(cfg.RuntimeDir, f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg.RuntimeDir = dir
	build := buildID(cfg, "2.9.6", "314.0.7")
	changed := func(f string) bool {
		t.Helper()
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(f, b, 0o644)
		return buildID(cfg, "2.9.6", "314.0.7") != build
	}
	worker := proc.WorkerSources(dir)
	if len(worker) < 5 {
		t.Fatalf("the Worker's sources: %v", worker)
	}
	for _, f := range worker {
		if !changed(f) {
			t.Errorf("a change to %s leaves the build as it was", f)
		}
	}
	if changed(filepath.Join(dir, "host.ts")) {
		t.Error("a change to host.ts alone makes a new build")
	}
}
