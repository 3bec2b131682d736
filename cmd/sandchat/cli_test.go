package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
)

func TestCLI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	cli := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, args, &out, &errOut)
		return out.String(), errOut.String(), err
	}

	t.Run("user create prints the token alone", func(t *testing.T) {
		out, _, err := cli("user", "create", "--name", "ops", "--admin", "--database-url", dbURL)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^sct_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
			t.Fatalf("stdout %q", out)
		}
	})
	t.Run("user create needs a name", func(t *testing.T) {
		if _, _, err := cli("user", "create", "--database-url", dbURL); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("migrate twice changes nothing", func(t *testing.T) {
		out, _, err := cli("migrate", "--database-url", dbURL)
		if err != nil || !strings.Contains(out, "(was ") {
			t.Fatalf("%q %v", out, err)
		}
		fields := strings.Fields(out) // database at version N (was N)
		if fields[3] != strings.TrimSuffix(fields[5], ")") {
			t.Fatalf("a second migrate moved the version: %q", out)
		}
	})
	for _, cmd := range [][]string{{"--help"}, {"serve", "--help"}, {"migrate", "--help"}, {"user", "create", "--help"}} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			out, errOut, err := cli(cmd...)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatal(err)
			}
			if !strings.Contains(out+errOut, "Usage") {
				t.Fatalf("no usage in %q", out+errOut)
			}
		})
	}
	t.Run("--version names the build and the pinned runtime", func(t *testing.T) {
		out, _, err := cli("--version")
		if err != nil || !regexp.MustCompile(`^sandchat \S+.*, deno 2\.\d+\.\d+, pyodide \d+\.\d+\.\d+\n$`).MatchString(out) {
			t.Fatalf("%q %v", out, err)
		}
	})
	// A bad value must stop serve before it starts. Should one be accepted, serve runs
	// on a free port, the test's schema and prefix, and its deadline ends it: the case
	// fails in seconds instead of hanging (the bad flag comes last, so it wins).
	_, prefix := testenv.Redis(t)
	safe := []string{"serve", "--addr", "127.0.0.1:0", "--database-url", dbURL, "--redis-prefix", prefix, "--sandbox=false"}
	bad := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"bad duration", append(safe, "--event-retention", "soon"), `SANDCHAT_EVENT_RETENTION: "soon" is not a positive duration`},
		{"bad origin", append(safe, "--allowed-origins", "evil"), `SANDCHAT_ALLOWED_ORIGINS: "evil" is not an origin`},
		{"bad log level", append(safe, "--log-level", "loud"), `SANDCHAT_LOG_LEVEL: "loud" is not debug, info, warn or error`},
		{"bad database url", append(safe, "--database-url", "mysql://x"), "SANDCHAT_DATABASE_URL: not a postgres:// URL"},
		{"queue too small", append(safe, "--ws-queue-bytes", "10"), "SANDCHAT_WS_QUEUE_BYTES: 10 is below the 64 KiB minimum"},
		{"address not a port", append(safe, "--addr", "localhost"), `SANDCHAT_ADDR: "localhost" is not host:port`},
		{"unknown flag", append(safe, "--frobnicate"), "flag provided but not defined: -frobnicate"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			err := run(ctx, tc.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v (stderr %q), want an error containing %q", tc.args, err, errOut.String(), tc.want)
			}
		})
	}

	t.Run("admin token file survives restarts", func(t *testing.T) {
		e := &testEnv{t: t, databaseURL: dbURL}
		e.rdb, e.redisPrefix = testenv.Redis(t)
		path := filepath.Join(t.TempDir(), "token")
		m := e.node()
		first, err := m.adminToken(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		again, err := m.adminToken(ctx, path)
		if err != nil || again != first {
			t.Fatalf("second start gave %q (%v), want the kept %q", again, err, first)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Fatalf("token file mode %v", fi.Mode())
		}
		_ = os.WriteFile(path, []byte("sct_stale\n"), 0o600)
		if fresh, err := m.adminToken(ctx, path); err != nil || fresh == first || fresh == "sct_stale" {
			t.Fatalf("stale token not replaced: %q %v", fresh, err)
		}
	})
}
