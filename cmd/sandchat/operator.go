package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/sandbox/redisstore"
)

// What `sandchat doctor`, `exec` and `bench` print: the sandbox hands over findings,
// results and figures, and the wording for an operator lives here.

// engineStore is the engine's state store. The operator commands keep all of a session
// in Redis; the server adds the cold tier in Postgres.
func engineStore(rdb redis.UniversalClient, cfg sandbox.Config, opt ...redisstore.Options) (*redisstore.Store, error) {
	return redisstore.New(rdb, cfg.RedisPrefix, cfg.SessionTTL, opt...)
}

func randomName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// doctor checks everything the Python sandbox needs and writes a report: where Deno,
// Pyodide and the runtime are, their versions, Redis, and a real run through a started
// engine. It returns an error when the sandbox would be unavailable, so the command
// exits non-zero.
func doctor(ctx context.Context, cfg sandbox.Config, rdb redis.UniversalClient, w io.Writer) error {
	var problems []error
	check := func(name string, err error, detail string) {
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", name, err))
			fmt.Fprintf(w, "✗ %-12s %v\n", name, err)
			return
		}
		fmt.Fprintf(w, "✓ %-12s %s\n", name, detail)
	}
	for _, c := range sandbox.Preflight(ctx, cfg) {
		if c.Warn {
			// A warning is not a failure: the sandbox works, but not as users will expect.
			fmt.Fprintf(w, "! %-12s %s\n", c.Name, c.Detail)
			continue
		}
		check(c.Name, c.Err, c.Detail)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		check("redis", err, "")
	} else {
		check("redis", nil, "reachable")
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}

	cfg.WarmPool = 0
	st, err := engineStore(rdb, cfg)
	if err != nil {
		return err
	}
	e, err := sandbox.New(cfg, st, nil)
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
	s := e.Status(ctx)
	check("engine", nil, fmt.Sprintf("started in %s (base snapshot %.12s)", time.Since(t0).Round(time.Millisecond), s.BaseHash))
	check("isolation", nil, s.Isolation)
	key := "doctor:" + randomName()
	defer e.Reset(context.WithoutCancel(ctx), key)
	r, err := e.Execute(ctx, key, sandbox.Request{Code: "import sys, platform\nf'Python {sys.version.split()[0]} on {platform.machine()}'"})
	if err == nil && r.Status != sandbox.StatusSuccess {
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

// execOptions shape one operator run (`sandchat exec`).
type execOptions struct {
	Key     string        // session key; empty means a throwaway session
	Timeout time.Duration // zero: the configured default
	JSON    bool          // print the whole Result as JSON instead of text
	Files   []string      // local files to expose under /data
}

// execCode runs code through a one-host engine, the way the server would, and writes
// the outcome: live output to stdout/stderr, then the trailing expression, the error or
// the artifacts. With a Key the session persists in Redis and later runs continue it.
func execCode(ctx context.Context, cfg sandbox.Config, rdb redis.UniversalClient, code string, opt execOptions, stdout, stderr io.Writer) (sandbox.Result, error) {
	cfg.WarmPool = 0
	st, err := engineStore(rdb, cfg)
	if err != nil {
		return sandbox.Result{}, err
	}
	e, err := sandbox.New(cfg, st, nil)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer e.Close()
	if err := e.Start(ctx); err != nil {
		return sandbox.Result{}, err
	}
	key := opt.Key
	if key == "" {
		key = "exec:" + randomName()
		defer e.Reset(context.WithoutCancel(ctx), key)
	}
	var files []sandbox.File
	for _, f := range opt.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			return sandbox.Result{}, err
		}
		files = append(files, sandbox.File{Name: filepath.Base(f), Data: b})
	}
	req := sandbox.Request{Code: code, Timeout: opt.Timeout,
		Data: func(context.Context, map[string]string) ([]sandbox.File, error) { return files, nil }}
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

// bench measures the engine under a prefix of its own, removed after, and prints the
// table and the ratios against a fresh process per run.
func bench(ctx context.Context, cfg sandbox.Config, rdb redis.UniversalClient, w io.Writer, n int) error {
	main, err := engineStore(rdb, cfg)
	if err != nil {
		return err
	}
	scratchCfg := cfg
	scratchCfg.RedisPrefix = cfg.RedisPrefix + "bench-" + randomName() + ":"
	scratch, err := engineStore(rdb, scratchCfg)
	if err != nil {
		return err
	}
	defer func() { _ = scratch.Purge(context.WithoutCancel(ctx)) }()
	rows, err := sandbox.BenchRows(ctx, scratchCfg, main, scratch, n, w)
	if err != nil {
		return err
	}
	printBench(w, rows)
	return nil
}

// printBench writes rows as a table, then the ratios against a fresh process per run.
func printBench(w io.Writer, rows []sandbox.BenchRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tp50\tp95\ttarget\tmet")
	var fresh *sandbox.BenchRow
	for i, r := range rows {
		if r.Fresh {
			fresh = &rows[i]
		}
		target, verdict := "-", ""
		if met, ok := r.Met(); ok {
			target = fmt.Sprintf("≤ %.0f %s", r.Target, r.Unit)
			verdict = "yes"
			if !met {
				verdict = fmt.Sprintf("no (%.0f%% over)", (r.P50/r.Target-1)*100)
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f %s\t%.1f %s\t%s\t%s\n", r.Name, r.P50, r.Unit, r.P95, r.Unit, target, verdict)
	}
	tw.Flush()
	if fresh == nil || fresh.P50 <= 0 {
		return
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		switch {
		case r.Ratio == sandbox.RatioFaster && r.P50 > 0:
			fmt.Fprintf(w, "fresh process per run is %.0f× slower than %s\n", fresh.P50/r.P50, r.Name)
		case r.Ratio == sandbox.RatioStarts:
			fmt.Fprintf(w, "%s took as long as %.1f fresh starts (target ≤ 10)\n", r.Name, r.P50/fresh.P50)
		}
	}
}
