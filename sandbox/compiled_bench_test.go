package sandbox

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs/pkgstest"
)

// BenchmarkCompiledRestore: the restore of a session that loaded a compiled extension
// (installed with micropip from a local index; such a session persists as its cells and
// wheels, not its heap) beside the snapshot restore of a session without one, and a
// fresh Deno + Pyodide process started in the same run (the floor of any new process;
// this VM is slow at page faults, so compare ratios). What is timed is the run after an
// eviction: a warm spare takes the session, installs its wheels again and replays.
//
//	go test ./sandbox -run '^$' -bench CompiledRestore -benchtime 5x
func BenchmarkCompiledRestore(b *testing.B) {
	idx := newPipIndex(b, pkgstest.Release{Wheels: []pkgstest.Wheel{extWheel(b, "sandchat_ext", "1.0").wheel()}})
	e := benchEngineWith(b, withPip(idx, readableTempDir(b)))
	install := "import micropip\nawait micropip.install('sandchat-ext')\nimport sandchat_ext\nn = sandchat_ext.triple(14)"
	for _, s := range []struct{ name, setup, from string }{
		{"compiled-replay", install, FromReplay},
		{"plain-snapshot", "n = 3 * 14", FromSnapshot},
	} {
		b.Run(s.name, func(b *testing.B) {
			key := "restore-" + s.name
			benchRun(b, e, key, s.setup)
			benchRun(b, e, key, "data = [str(i) for i in range(1000)]")
			for b.Loop() {
				b.StopTimer()
				if err := liveOf(b, e, key).Checkpoint(context.Background()); err != nil {
					b.Fatal(err)
				}
				evictLive(b, e, key)
				b.StartTimer()
				r := benchRun(b, e, key, "n")
				if r.Session.RestoredFrom != s.from || resultOf(r) != "42" {
					b.Fatalf("%s restored from %s", resultOf(r), r.Session.RestoredFrom)
				}
			}
		})
	}
	b.Run("fresh-deno-pyodide", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(e.cfg.DenoPath, "run", "--no-prompt", "--no-config", "--quiet",
				"--allow-read="+e.cfg.PyodideDir, filepath.Join(e.cfg.RuntimeDir, "fresh.ts"), e.cfg.PyodideDir, "x = 1\nx + 1")
			cmd.Env = []string{"DENO_DIR=" + e.cacheDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
			if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "2" {
				b.Fatalf("fresh pyodide: %v %s", err, out)
			}
		}
	})
}
