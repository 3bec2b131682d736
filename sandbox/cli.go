package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Doctor checks everything the Python sandbox needs and writes a report for an
// operator: where Deno, Pyodide and the runtime are (and how they were found), their
// versions, Redis, and a real run through a started engine. It returns an error when the
// sandbox would be unavailable, so `sandchat doctor` can exit non-zero.
func Doctor(ctx context.Context, cfg Config, rdb redis.UniversalClient, w io.Writer) error {
	cfg = Locate(cfg)
	var problems []error
	check := func(name string, err error, detail string) {
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", name, err))
			fmt.Fprintf(w, "✗ %-12s %v\n", name, err)
			return
		}
		fmt.Fprintf(w, "✓ %-12s %s\n", name, detail)
	}
	// A warning is not a failure: the sandbox works, but not as users will expect.
	warn := func(name, detail string) { fmt.Fprintf(w, "! %-12s %s\n", name, detail) }
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
	if fileExists(filepath.Join(cfg.PackageDir, "pyodide-lock.json")) {
		n, _ := countWheels(cfg.PackageDir)
		source := "the others are not available (SANDCHAT_SANDBOX_PACKAGE_CDN is off)"
		if cfg.PackageCDN != "" {
			source = "the others are fetched from " + cfg.PackageCDN
		}
		check("packages", nil, fmt.Sprintf("%s holds %d wheels of its lock; %s", cfg.PackageDir, n, source))
	} else if cfg.PackageCDN != "" {
		check("packages", nil, "from "+cfg.PackageCDN)
	} else {
		check("packages", errors.New("no pyodide-lock.json in the package directory and no CDN: only the standard library can be imported"), "")
	}
	if src, ok := numpySource(cfg); ok {
		check("numpy", nil, src)
	} else {
		warn("numpy", src)
	}
	if rdb == nil {
		check("redis", errors.New("no client"), "")
	} else if err := rdb.Ping(ctx).Err(); err != nil {
		check("redis", err, "")
	} else {
		check("redis", nil, "reachable")
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}

	cfg.WarmPool = 0
	e, err := New(cfg, rdb, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	t0 := time.Now()
	if err := e.Start(ctx); err != nil {
		return err
	}
	if ok, why := e.Available(); !ok {
		check("engine", errors.New(why), "")
		return errors.New(why)
	}
	check("engine", nil, fmt.Sprintf("started in %s (base snapshot %.12s)", time.Since(t0).Round(time.Millisecond), e.rt.baseHash))
	check("isolation", nil, e.rt.isolation)
	key := "doctor:" + newToken()
	defer e.Reset(context.WithoutCancel(ctx), key)
	r, err := e.Execute(ctx, key, Request{Code: "import sys, platform\nf'Python {sys.version.split()[0]} on {platform.machine()}'"})
	if err == nil && r.Status != StatusSuccess {
		err = fmt.Errorf("%s: %+v", r.Status, r.Error)
	}
	if err != nil {
		check("run", err, "")
		return err
	}
	check("run", nil, fmt.Sprintf("%s in %d ms, state %d bytes", *r.Result, r.ExecutionMS, r.Session.StateBytes))
	pi, err := e.Inspect(key)
	if err != nil {
		check("session", err, "")
		return err
	}
	desc := fmt.Sprintf("process %d as uid %s", pi.PID, pi.UID)
	if len(pi.Namespaces) > 0 {
		desc += "; own namespaces: " + strings.Join(pi.Namespaces, ", ")
	}
	if pi.Cgroup != "" {
		desc += fmt.Sprintf("; cgroup %s (memory max %d MiB, tasks max %d, using %d MiB)", pi.Cgroup, pi.MemoryMax>>20, pi.TasksMax, pi.MemoryUsed>>20)
	}
	check("session", nil, desc)
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

// ExecOptions shape one operator run (`sandchat exec`).
type ExecOptions struct {
	Key     string        // session key; empty means a throwaway session
	Timeout time.Duration // zero: the configured default
	JSON    bool          // print the whole Result as JSON instead of text
	Files   []string      // local files to expose under /data
}

// Exec runs code through a one-host engine, the way the server would, and writes the
// outcome: live output to stdout/stderr, then the trailing expression, the error or the
// artifacts. With a Key the session persists in Redis and later runs continue it.
func Exec(ctx context.Context, cfg Config, rdb redis.UniversalClient, code string, opt ExecOptions, stdout, stderr io.Writer) (Result, error) {
	cfg = Locate(cfg)
	cfg.WarmPool = 0
	e, err := New(cfg, rdb, nil)
	if err != nil {
		return Result{}, err
	}
	defer e.Close()
	if err := e.Start(ctx); err != nil {
		return Result{}, err
	}
	key := opt.Key
	if key == "" {
		key = "exec:" + newToken()
		defer e.Reset(context.WithoutCancel(ctx), key)
	}
	req := Request{Code: code, Timeout: opt.Timeout}
	for _, f := range opt.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			return Result{}, err
		}
		req.Data = append(req.Data, File{Name: filepath.Base(f), Data: b})
	}
	if !opt.JSON {
		req.OnOutput = func(stream, chunk string) {
			if stream == "stderr" {
				io.WriteString(stderr, chunk)
			} else {
				io.WriteString(stdout, chunk)
			}
		}
	}
	r, err := e.Execute(ctx, key, req)
	if err != nil {
		return r, err
	}
	if opt.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return r, enc.Encode(r)
	}
	if r.Result != nil {
		fmt.Fprintln(stdout, *r.Result)
	}
	if r.Error != nil {
		if r.Error.Traceback != "" {
			io.WriteString(stderr, r.Error.Traceback)
		} else {
			fmt.Fprintf(stderr, "%s: %s\n", r.Error.Type, r.Error.Message)
		}
	}
	for _, a := range r.Artifacts {
		fmt.Fprintf(stderr, "[artifact] %s (%s, %d bytes)\n", a.Name, a.ContentType, a.Size)
	}
	fmt.Fprintf(stderr, "[%s in %d ms, session %s v%d, from %s]\n", r.Status, r.ExecutionMS, key, r.Session.Version, r.Session.RestoredFrom)
	return r, nil
}
