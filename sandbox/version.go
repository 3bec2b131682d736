package sandbox

import (
	_ "embed"
	"encoding/json"
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
