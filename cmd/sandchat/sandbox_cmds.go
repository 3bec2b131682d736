package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/sandbox"
)

// sandboxCommand parses the flags of doctor, exec or bench (the common ones and what
// extra adds) and opens Redis.
func sandboxCommand(ctx context.Context, name, help string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (Config, redis.UniversalClient, []string, error) {
	var cfg Config
	fs := newFlagSet(name, help, stderr)
	finish := cfg.bind(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return cfg, nil, nil, err
	}
	if err := finish(); err != nil {
		return cfg, nil, nil, err
	}
	rdb, _, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		return cfg, nil, nil, err
	}
	return cfg, rdb, fs.Args(), nil
}

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, rdb, _, err := sandboxCommand(ctx, "doctor [flags]", "Checks the Python sandbox: Deno, Pyodide, Redis, and a real run.", args, stderr, nil)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return doctor(ctx, cfg.Sandbox.Engine, rdb, stdout)
}

func runExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var opt execOptions
	var files list
	cfg, rdb, rest, err := sandboxCommand(ctx, "exec [flags] [code]",
		"Runs Python through the sandbox engine, code from the argument or stdin. With --session the state persists like a conversation's.",
		args, stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&opt.Key, "session", "", "session key to keep state under (e.g. ops:1); empty: a throwaway session")
			fs.BoolVar(&opt.JSON, "json", false, "print the whole result as JSON")
			fs.DurationVar(&opt.Timeout, "timeout", 0, "time limit; default: the sandbox's")
			fs.Var(&files, "data", "comma-separated local files to expose read-only under /data")
		})
	if err != nil {
		return err
	}
	defer rdb.Close()
	code := strings.Join(rest, " ")
	if code == "" {
		raw, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		code = string(raw)
	}
	if strings.TrimSpace(code) == "" {
		return errors.New("no code: pass it as an argument or on stdin")
	}
	opt.Files = files
	res, err := execCode(ctx, cfg.Sandbox.Engine, rdb, code, opt, stdout, stderr)
	if err != nil {
		return err
	}
	if res.Status != sandbox.StatusSuccess {
		return fmt.Errorf("run ended with status %s", res.Status)
	}
	return nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	n := 0
	cfg, rdb, _, err := sandboxCommand(ctx, "bench [flags]",
		"Measures the sandbox engine: warm runs, new conversations, cold restores, state size, RSS and PSS of session processes, and a fresh Deno + Pyodide per run for comparison.",
		args, stderr, func(fs *flag.FlagSet) { fs.IntVar(&n, "n", 30, "samples per measurement") })
	if err != nil {
		return err
	}
	defer rdb.Close()
	return bench(ctx, cfg.Sandbox.Engine, rdb, stdout, n)
}
