package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Check is one finding of Preflight: Err when the sandbox cannot work without a fix,
// Warn when it works but not as users will expect.
type Check struct {
	Name   string
	Detail string
	Err    error
	Warn   bool
}

// Preflight checks, without starting anything, what the Python sandbox needs: its
// configuration, where Deno, Pyodide and the runtime are and their versions, and which
// packages can be served. `sandchat doctor` prints it, then starts an engine.
func Preflight(ctx context.Context, cfg Config) []Check {
	cfg = Locate(cfg)
	var out []Check
	check := func(name string, err error, detail string) {
		out = append(out, Check{Name: name, Err: err, Detail: detail})
	}
	fix := errors.New("not found; run `npm ci --prefix sandbox/runtime` or set its path in the configuration")

	if err := cfg.Validate(); err != nil {
		check("config", err, "")
	} else {
		check("config", nil, fmt.Sprintf("timeout %s (max %s), memory %d MiB, output %d KiB, code %d KiB, network %v",
			cfg.Timeout, cfg.MaxTimeout, cfg.MemoryBytes>>20, cfg.MaxOutput>>10, cfg.MaxCode>>10, allowText(cfg.NetworkAllow)))
	}
	if cfg.RuntimeDir == "" || !fileExists(filepath.Join(cfg.RuntimeDir, "host.ts")) {
		check("runtime", fix, "")
	} else {
		check("runtime", nil, cfg.RuntimeDir)
	}
	if !isExecutable(cfg.DenoPath) {
		check("deno", fix, "")
	} else if v, err := denoVersion(ctx, cfg.DenoPath); err != nil {
		check("deno", fmt.Errorf("%s does not run: %w", cfg.DenoPath, err), "")
	} else {
		check("deno", nil, v+" at "+cfg.DenoPath)
	}
	if v := pyodideVersion(cfg.PyodideDir); v == "" || !fileExists(filepath.Join(cfg.PyodideDir, "pyodide.asm.wasm")) {
		check("pyodide", fix, "")
	} else {
		check("pyodide", nil, v+" at "+cfg.PyodideDir)
	}
	// A source that does not answer: users who import a package it would serve are told
	// to ask their administrator, who reads here (and in the server's log) what to set.
	var down error
	if cfg.PackageCDN != "" {
		if err := probeSource(ctx, cfg.PackageCDN); err != nil {
			down = fmt.Errorf("the package source %s cannot be reached (%v): set SANDCHAT_SANDBOX_PACKAGE_CDN (official, or a mirror's URL) or SANDCHAT_SANDBOX_PACKAGE_DIR (a local mirror)", cfg.PackageCDN, err)
		}
	}
	if fileExists(filepath.Join(cfg.PackageDir, "pyodide-lock.json")) {
		n, _ := countWheels(cfg.PackageDir)
		switch {
		case cfg.PackageCDN == "":
			check("packages", nil, fmt.Sprintf("%s holds %d wheels of its lock; the others are not available (SANDCHAT_SANDBOX_PACKAGE_CDN is off)", cfg.PackageDir, n))
		case down != nil:
			out = append(out, Check{Name: "packages", Warn: true, Detail: fmt.Sprintf("%s holds %d wheels of its lock; the others are not available: %v", cfg.PackageDir, n, down)})
		default:
			check("packages", nil, fmt.Sprintf("%s holds %d wheels of its lock; the others are fetched from %s", cfg.PackageDir, n, cfg.PackageCDN))
		}
	} else if down != nil {
		check("packages", down, "")
	} else if cfg.PackageCDN != "" {
		check("packages", nil, "from "+cfg.PackageCDN)
	} else {
		check("packages", errors.New("no pyodide-lock.json in the package directory and no CDN: only the standard library can be imported"), "")
	}
	if down != nil {
		cfg.PackageCDN = "" // for numpy's line: what the mirror alone serves
	}
	if src, ok := numpySource(cfg); ok {
		check("numpy", nil, src)
	} else {
		out = append(out, Check{Name: "numpy", Detail: src, Warn: true})
	}
	return out
}

// probeSource asks the package source for its lock file, as the engine would for a
// wheel: whether it answers at all, and with the file.
func probeSource(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/pyodide-lock.json", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("it answered %s", resp.Status)
	}
	return nil
}

func allowText(a []string) string {
	if len(a) == 0 {
		return "off"
	}
	return fmt.Sprint(a)
}

// numpySource says where `import numpy` would be served from, or why it cannot be:
// the first thing users of a data-analysis assistant ask for.
func numpySource(cfg Config) (string, bool) {
	var lock struct {
		Packages map[string]struct {
			FileName string `json:"file_name"`
		} `json:"packages"`
	}
	lockPath := filepath.Join(cfg.PackageDir, "pyodide-lock.json")
	b, err := os.ReadFile(lockPath)
	if err == nil {
		err = json.Unmarshal(b, &lock)
	}
	if err != nil {
		if cfg.PackageCDN != "" {
			return "from " + cfg.PackageCDN + " (no local lock file to check it against)", true
		}
		return "no package source can serve numpy: no pyodide-lock.json in " + cfg.PackageDir +
			" and no CDN; set SANDCHAT_SANDBOX_PACKAGE_DIR to a mirror of the Pyodide distribution or SANDCHAT_SANDBOX_PACKAGE_CDN", false
	}
	p, listed := lock.Packages["numpy"]
	switch {
	case !listed:
		return "numpy is not in " + lockPath + ": `import numpy` fails", false
	case p.FileName != "" && fileExists(filepath.Join(cfg.PackageDir, filepath.Base(p.FileName))):
		return "served from " + filepath.Join(cfg.PackageDir, filepath.Base(p.FileName)), true
	case cfg.PackageCDN != "":
		return "fetched from " + cfg.PackageCDN + " (not in the local mirror)", true
	}
	return fmt.Sprintf("no package source can serve numpy: %s lists it but %s is not there and no CDN is set; mirror the Pyodide distribution into SANDCHAT_SANDBOX_PACKAGE_DIR or set SANDCHAT_SANDBOX_PACKAGE_CDN",
		lockPath, filepath.Base(p.FileName)), false
}

func countWheels(dir string) (int, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.whl"))
	return len(m), err
}
