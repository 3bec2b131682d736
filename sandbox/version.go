package sandbox

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

//go:embed runtime/package.json
var runtimePackage []byte

// Pinned returns the exact Deno and Pyodide versions this build of the engine expects
// (sandbox/runtime/package.json): snapshots are only valid for one build of each.
func Pinned() (deno, pyodide string) {
	var p struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	_ = json.Unmarshal(runtimePackage, &p)
	return p.Dependencies["deno"], p.Dependencies["pyodide"]
}

func denoVersion(ctx context.Context, deno string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, deno, "--version")
	cmd.Env = []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("unexpected output %q", out)
	}
	return f[1], nil
}

func pyodideVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Version
}

// buildID names what a snapshot is only valid for: the exact Pyodide, Deno and the
// runtime code that shaped the base heap.
func buildID(cfg Config, deno, py string) string {
	h := sha256.New()
	fmt.Fprintf(h, "pyodide=%s deno=%s\n", py, deno)
	if len(cfg.Preload) > 0 {
		// Preloaded modules are part of the base heap.
		fmt.Fprintf(h, "preload=%s\n", strings.Join(cfg.Preload, ","))
	}
	// What the Worker runs (its modules and the driver), named as the runtime directory
	// has them wherever it is: the control thread can change without making every saved
	// heap one of another build.
	for _, f := range proc.WorkerSources(cfg.RuntimeDir) {
		if b, err := os.ReadFile(f); err == nil {
			rel, _ := filepath.Rel(cfg.RuntimeDir, f)
			fmt.Fprintln(h, filepath.ToSlash(rel), len(b))
			h.Write(b)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.PyodideDir, "pyodide.asm.wasm")); err == nil {
		h.Write(b)
	}
	return py + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}
