package main

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox"
)

// operatorConfig is the sandbox as `sandchat doctor`/`exec` would see it, under the
// test's prefix, with the base snapshot the suite already booted.
func operatorConfig(e *testEnv) sandbox.Config {
	e.copyBase(baseSeed, e.redisPrefix)
	cfg := sandbox.DefaultConfig()
	cfg.RedisPrefix = e.redisPrefix
	cfg.PackageCDN = sandbox.CDNOff
	return cfg
}

func TestDoctorAndExec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cfg := operatorConfig(e)
	var out strings.Builder
	if err := doctor(ctx, cfg, e.rdb, &out); err != nil {
		t.Fatalf("doctor: %v\n%s", err, out.String())
	}
	// The npm package lists numpy in its lock file but ships no wheels: a warning, not ✓.
	for _, want := range []string{"✓ deno", "✓ pyodide", "✓ redis", "✓ run", "Python 3.", "✓ isolation", "✓ capacity     ", "session processes (one per 512 MiB of memory)", "! numpy        no package source can serve numpy"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor report lacks %q:\n%s", want, out.String())
		}
	}

	var so, se strings.Builder
	r, err := execCode(ctx, cfg, e.rdb, "print('out')\n6 * 7", execOptions{}, &so, &se)
	if err != nil || r.Status != sandbox.StatusSuccess || so.String() != "out\n42\n" {
		t.Fatalf("exec: %v %s stdout %q stderr %q", err, r.Status, so.String(), se.String())
	}

	// A package source that does not answer: the sandbox works, and the operator reads
	// what to set (users are only told to ask them).
	offline := cfg
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	offline.PackageCDN = "http://" + l.Addr().String() + "/pyodide/"
	l.Close()
	offline.PackageCacheDir = readableDir(t)
	out.Reset()
	if err := doctor(ctx, offline, e.rdb, &out); err != nil || !strings.Contains(out.String(), "! packages") ||
		!strings.Contains(out.String(), "cannot be reached") || !strings.Contains(out.String(), "SANDCHAT_SANDBOX_PACKAGE_CDN") {
		t.Errorf("doctor with an unreachable package source: %v\n%s", err, out.String())
	}

	bad := cfg
	bad.DenoPath = "/nonexistent/deno"
	out.Reset()
	if err := doctor(ctx, bad, e.rdb, &out); err == nil || !strings.Contains(out.String(), "npm ci --prefix sandbox/runtime") {
		t.Fatalf("doctor without deno: %v\n%s", err, out.String())
	}
}

// BenchmarkSandchatBench prints the same table as `sandchat bench`:
//
//	go test ./cmd/sandchat -run '^$' -bench SandchatBench -benchtime 1x
func BenchmarkSandchatBench(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	cfg := sandbox.DefaultConfig()
	cfg.RedisPrefix = prefix
	cfg.PackageCDN = sandbox.CDNOff
	for b.Loop() {
		if err := bench(context.Background(), cfg, rdb, os.Stdout, 20); err != nil {
			b.Fatal(err)
		}
	}
}
