package proc

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// WorkerEntry is the module, under the runtime directory, that a session process's
// control thread (host.ts) starts its Worker from.
const WorkerEntry = "worker/main.ts"

// RuntimeSources lists the runtime's sources under dir (its TypeScript and Python, not
// its node_modules), sorted: everything a session process may load or Deno compile.
func RuntimeSources(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && d.Name() == "node_modules":
			return filepath.SkipDir
		case !d.IsDir() && (strings.HasSuffix(p, ".ts") || strings.HasSuffix(p, ".py")):
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// relImport finds a module's imports of other runtime files: `import … from "./x.ts"`,
// `export … from "../y.ts"`, `import "./z.ts"`, over as many lines as they take.
var relImport = regexp.MustCompile(`(?m)^\s*(?:import|export)\s(?:[^"';]*?\sfrom\s)?\s*"(\.\.?/[^"]+)"`)

// WorkerSources lists what the Worker of a session process runs, sorted: the modules
// reachable by import from WorkerEntry, and the driver's Python (every .py of dir),
// which the Worker installs in the interpreter. They shape a base snapshot's heap; the
// control thread does not.
func WorkerSources(dir string) []string {
	seen := map[string]bool{}
	py, _ := filepath.Glob(filepath.Join(dir, "*.py"))
	for _, f := range py {
		seen[f] = true
	}
	queue := []string{filepath.Join(dir, WorkerEntry)}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		if seen[f] {
			continue
		}
		seen[f] = true
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range relImport.FindAllSubmatch(b, -1) {
			queue = append(queue, filepath.Join(filepath.Dir(f), string(m[1])))
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}
