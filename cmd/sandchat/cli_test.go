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
	t.Run("user create and user login-link print one-time login links", func(t *testing.T) {
		e := &testEnv{t: t, databaseURL: dbURL}
		e.rdb, e.redisPrefix = testenv.Redis(t)
		m := e.node()
		base := "http://" + m.Addr()
		name := "lena-" + randomName()
		out, errOut, err := cli("user", "create", "--name", name, "--database-url", dbURL, "--public-url", base)
		if err != nil || !regexp.MustCompile(`^sct_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
			t.Fatalf("stdout %q, %v: want the token alone", out, err)
		}
		created := regexp.MustCompile(`open (` + regexp.QuoteMeta(base) + `/login#t=scl_[A-Za-z0-9_-]{43})\n`).FindStringSubmatch(errOut)
		if created == nil || !strings.Contains(errOut, "sandchat user login-link --name "+name) {
			t.Fatalf("stderr %q: want a login link to %s and how to make another", errOut, base)
		}
		out, _, err = cli("user", "login-link", "--name", name, "--database-url", dbURL, "--public-url", base+"/")
		if err != nil || !regexp.MustCompile(`^`+regexp.QuoteMeta(base)+`/login#t=scl_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
			t.Fatalf("login-link stdout %q, %v: want the link alone", out, err)
		}
		for _, link := range []string{created[1], strings.TrimSpace(out)} {
			if resp, raw, _ := exchange(t, base, link, nil); resp.StatusCode != 200 {
				t.Fatalf("exchange %s: %d %s", link, resp.StatusCode, raw)
			}
		}
		// Names are not unique: a name two users share needs --id.
		if _, _, err := cli("user", "create", "--name", name, "--database-url", dbURL); err != nil {
			t.Fatal(err)
		}
		if _, _, err := cli("user", "login-link", "--name", name, "--database-url", dbURL); err == nil || !strings.Contains(err.Error(), "2 users are named") {
			t.Fatalf("ambiguous name: %v", err)
		}
		if _, _, err := cli("user", "login-link", "--name", "nobody-"+randomName(), "--database-url", dbURL); err == nil || !strings.Contains(err.Error(), "no user is named") {
			t.Fatalf("unknown name: %v", err)
		}
		if out, _, err := cli("user", "login-link", "--id", "1", "--database-url", dbURL); err != nil || !strings.Contains(out, "/login#t=scl_") {
			t.Fatalf("by id: %q %v", out, err)
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
	for _, cmd := range [][]string{{"--help"}, {"serve", "--help"}, {"migrate", "--help"}, {"user", "create", "--help"}, {"user", "login-link", "--help"}} {
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
		{"bad duration", append(safe, "--event-retention", "soon"), `SANDCHAT_EVENT_RETENTION: "soon" is not a duration`},
		{"bad origin", append(safe, "--allowed-origins", "evil"), `SANDCHAT_ALLOWED_ORIGINS: "evil" is not an origin`},
		{"bad log level", append(safe, "--log-level", "loud"), `SANDCHAT_LOG_LEVEL: "loud" is not debug, info, warn or error`},
		{"bad database url", append(safe, "--database-url", "mysql://x"), "SANDCHAT_DATABASE_URL: not a postgres:// URL"},
		{"queue too small", append(safe, "--ws-queue-bytes", "10"), "SANDCHAT_WS_QUEUE_BYTES: 10 bytes is out of range (64 KiB to 1 GiB)"},
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

	t.Run("serve with an admin token file prints a login link that signs the admin in", func(t *testing.T) {
		e := &testEnv{t: t, databaseURL: dbURL}
		e.rdb, e.redisPrefix = testenv.Redis(t)
		m := e.node()
		var out bytes.Buffer
		if err := m.printSignIn(ctx, filepath.Join(t.TempDir(), "token"), &out); err != nil {
			t.Fatal(err)
		}
		base := "http://" + m.Addr()
		link := regexp.MustCompile(`Sign in: open (` + regexp.QuoteMeta(base) + `/login#t=scl_[A-Za-z0-9_-]{43})\n`).FindStringSubmatch(out.String())
		if link == nil || !regexp.MustCompile(`API token of admin: sct_`).MatchString(out.String()) {
			t.Fatalf("serve printed %q: want a login link and the API token", out.String())
		}
		resp, raw, _ := exchange(t, base, link[1], nil)
		if resp.StatusCode != 200 || !strings.Contains(string(raw), `"admin":true`) {
			t.Fatalf("exchange: %d %s", resp.StatusCode, raw)
		}
	})
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
