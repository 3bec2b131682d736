package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// AvailablePackages lists the packages an import can load: those of the package dir's
// pyodide-lock.json whose wheel is present there, or all of them when a CDN fills the
// gaps. The model is told this list, so it does not promise numpy where there is none.
func AvailablePackages(c Config) []string {
	c = Locate(c)
	if c.PackageDir == "" {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(c.PackageDir, "pyodide-lock.json"))
	if err != nil {
		return nil
	}
	var lock struct {
		Packages map[string]struct {
			Name        string `json:"name"`
			FileName    string `json:"file_name"`
			PackageType string `json:"package_type"`
		} `json:"packages"`
	}
	if json.Unmarshal(raw, &lock) != nil {
		return nil
	}
	var out []string
	for _, p := range lock.Packages {
		if p.PackageType != "" && p.PackageType != "package" {
			continue // shared libraries and the like are not imported by name
		}
		if c.PackageCDN != "" || fileExists(filepath.Join(c.PackageDir, p.FileName)) {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Loadable tells whether a session of this engine could load package name (as
// Pyodide's lock file names it) now: its wheels are at hand, or the package source
// answers (pkgs.Fetcher.Loadable). False while the engine is not running.
func (e *Engine) Loadable(ctx context.Context, name string) bool {
	if ok, _ := e.Available(); !ok {
		return false
	}
	if e.fetch != nil {
		return e.fetch.Loadable(ctx, name)
	}
	return slices.Contains(AvailablePackages(e.cfg), name)
}
