package proc

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// copyRuntime copies the runtime's sources into a directory of the test's.
func copyRuntime(t *testing.T) string {
	t.Helper()
	src, dst := filepath.Join("..", "..", "runtime"), t.TempDir()
	for _, f := range RuntimeSources(src) {
		rel, _ := filepath.Rel(src, f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestRuntimeFilesCoverEveryModule: the Worker's sources are every module under worker/
// (each reached by import from its entry, none left out), what they import and the
// driver; and a change to any source of the runtime changes the key of the compiled-code
// cache, so no process runs code compiled from an older module.
func TestRuntimeFilesCoverEveryModule(t *testing.T) {
	dir := copyRuntime(t)
	worker := WorkerSources(dir)
	mods, _ := filepath.Glob(filepath.Join(dir, "worker", "*.ts"))
	if len(mods) < 2 {
		t.Fatalf("worker/ holds %v", mods)
	}
	for _, f := range append(mods, filepath.Join(dir, "driver.py"), filepath.Join(dir, "display.py"), filepath.Join(dir, "messages.ts"), filepath.Join(dir, "protocol.ts")) {
		if !slices.Contains(worker, f) {
			t.Errorf("%s is not among the Worker's sources (%v)", f, worker)
		}
	}
	if slices.Contains(worker, filepath.Join(dir, "host.ts")) {
		t.Error("host.ts is among the Worker's sources")
	}
	all := RuntimeSources(dir)
	for _, f := range worker {
		if !slices.Contains(all, f) {
			t.Errorf("%s is a Worker source but not a runtime source", f)
		}
	}
	j := &Jail{cfg: Spec{RuntimeDir: dir}}
	key := j.CodeKey()
	for _, f := range all {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		if j.CodeKey() == key {
			t.Errorf("a change to %s leaves the code cache's key as it was", f)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
