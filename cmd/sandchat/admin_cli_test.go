package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestAdminCLI: the administrators' commands list one item a line, id first, with
// names that cannot break a line; what they revoke stops on the running server at once,
// its sockets closed; each change is recorded as the command line's, with the
// operating-system user who ran it; bad input is refused with what to give.
func TestAdminCLI(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	m := env.node()
	ctx := context.Background()
	cli := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append(args, "--database-url", env.databaseURL, "--redis-url", testenv.RedisURL(), "--redis-prefix", env.redisPrefix), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	must := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := cli(args...)
		if err != nil {
			t.Fatalf("sandchat %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out, errOut
	}
	root, rootID := m.user(t, "root", true)
	bob, bobID := m.user(t, "bob", false)
	_, oddID := m.user(t, "two\tparts\nand a line", false)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }

	t.Run("user list", func(t *testing.T) {
		out, _ := must("user", "list")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d lines for 3 users:\n%s", len(lines), out)
		}
		for i, want := range []string{id(rootID) + "\troot\tadmin\tenabled\t", id(bobID) + "\tbob\tuser\tenabled\t", id(oddID) + "\t\"two\\tparts\\nand a line\"\tuser\tenabled\t"} {
			if !strings.HasPrefix(lines[i], want) || len(strings.Split(lines[i], "\t")) != 6 {
				t.Errorf("line %d: %q, want it to start with %q and have 6 fields", i, lines[i], want)
			}
		}
		out, _ = must("user", "list", "--json")
		var users []sandchat.Account
		if err := json.Unmarshal([]byte(out), &users); err != nil || len(users) != 3 {
			t.Fatalf("--json: %v %s", err, out)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		out, errOut := must("token", "create", "--user", id(bobID), "--ttl", "720h", "--note", "ci")
		if !regexp.MustCompile(`^sct_[A-Za-z0-9_-]{43}\n$`).MatchString(out) || !strings.Contains(errOut, "bob") {
			t.Fatalf("token create: stdout %q stderr %q, want the token alone on stdout", out, errOut)
		}
		secret := strings.TrimSpace(out)
		ci := m.as(t, secret)
		ci.must(200, "GET", "/api/v1/me", nil, nil)
		ws := ci.socket()
		ws.alive()
		out, _ = must("token", "list", "--user", id(bobID))
		if strings.Contains(out, secret) {
			t.Fatal("token list shows a secret")
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		fields := strings.Split(lines[len(lines)-1], "\t")
		if len(lines) != 2 || len(fields) != 8 || fields[1] != id(bobID) || fields[3] != "active" || fields[5] == "-" || fields[6] == "-" || fields[7] != "ci" {
			t.Fatalf("token list:\n%s", out)
		}
		must("token", "revoke", "--id", fields[0])
		ci.must(401, "GET", "/api/v1/me", nil, nil)
		closedWith(t, ws.conn, 4001)
		if out, _ := must("token", "list", "--user", id(bobID)); !strings.Contains(out, "\trevoked\t") {
			t.Fatalf("the revoked token is not listed as revoked:\n%s", out)
		}
		if _, _, err := cli("token", "revoke", "--id", "999999"); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("revoke of no token: %v", err)
		}
		if _, _, err := cli("token", "create", "--user", id(bobID), "--ttl", "1s"); err == nil || !strings.Contains(err.Error(), "at least 1m") {
			t.Fatalf("a ttl of a second: %v", err)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		_, _, browser := exchange(t, root.base, mintLink(root, bobID), nil)
		conn := cookieSocket(t, browser)
		out, _ := must("session", "list", "--user", id(bobID))
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 1 || len(strings.Split(lines[0], "\t")) != 6 {
			t.Fatalf("session list:\n%s", out)
		}
		must("session", "revoke", "--id", strings.Split(lines[0], "\t")[0])
		closedWith(t, conn, 4001)
		if resp, _ := browser.send("GET", "/api/v1/me", nil, nil); resp.StatusCode != 401 {
			t.Fatalf("the revoked session: %d", resp.StatusCode)
		}
	})

	t.Run("disable, enable, rename, delete", func(t *testing.T) {
		ws := bob.socket()
		must("user", "disable", "--id", id(bobID))
		bob.must(401, "GET", "/api/v1/me", nil, nil)
		closedWith(t, ws.conn, 4001)
		must("user", "enable", "--id", id(bobID))
		bob.must(200, "GET", "/api/v1/me", nil, nil)
		must("user", "rename", "--id", id(bobID), "--name", "robert")
		var me sandchat.User
		bob.must(200, "GET", "/api/v1/me", nil, &me)
		if me.Name != "robert" {
			t.Fatalf("renamed to %q", me.Name)
		}
		conv := bob.createConversation(0)
		if _, _, err := cli("user", "delete", "--id", id(bobID)); err == nil || !strings.Contains(err.Error(), "user erase --id "+id(bobID)) {
			t.Fatalf("delete of a user who owns a conversation: %v", err)
		}
		bob.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d", conv), nil, nil)
		must("user", "delete", "--id", id(bobID))
		bob.must(401, "GET", "/api/v1/me", nil, nil)
	})

	t.Run("export", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "root.zip")
		must("user", "export", "--id", id(rootID), "--out", path)
		zr, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		var names []string
		for _, f := range zr.File {
			names = append(names, f.Name)
		}
		if !strings.Contains(strings.Join(names, " "), "user.json") {
			t.Fatalf("export holds %v", names)
		}
		if _, _, err := cli("user", "export", "--id", "999999", "--out", filepath.Join(t.TempDir(), "none.zip")); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("export of no one: %v", err)
		}
	})

	t.Run("audit", func(t *testing.T) {
		out, _ := must("audit", "list")
		var actions []string
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			f := strings.Split(line, "\t")
			// The sign-in link was the admin's, by the API; the rest the command line's.
			who := "cli:" + osUser()
			if len(f) > 3 && f[3] == sandchat.ActionLoginLink {
				who = "user:" + id(rootID)
			}
			if len(f) != 6 || f[2] != who {
				t.Fatalf("audit line %q: want 6 fields, done by %s", line, who)
			}
			actions = append(actions, f[3])
		}
		want := "user.export user.delete user.rename user.enable user.disable session.revoke user.login_link token.revoke token.create"
		if got := strings.Join(actions, " "); got != want {
			t.Fatalf("audit, newest first: %s\nwant %s", got, want)
		}
		out, _ = must("audit", "list", "--user", id(bobID), "--limit", "1")
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, "\tuser.delete\t") {
			t.Fatalf("bob's newest action:\n%s", out)
		}
	})

	t.Run("refusals and help", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"user", "disable"}, "--id is required"},
			{[]string{"user", "rename", "--id", "1"}, "--name is required"},
			{[]string{"user", "export", "--id", "1"}, "--out is required"},
			{[]string{"token", "create"}, "--user is required"},
			{[]string{"user", "disable", "--id", "1", "extra"}, `unexpected argument "extra"`},
			{[]string{"token", "frobnicate"}, "unknown token subcommand"},
			// A list that selects nothing by mistake would read as "there is none".
			{[]string{"token", "list", "--user", "-5"}, "--user must be a positive number, not -5"},
			{[]string{"session", "list", "--user", "0"}, "--user must be a positive number, not 0"},
			{[]string{"token", "list", "--user", "999999"}, "User not found"},
			{[]string{"session", "list", "--user", "999999"}, "User not found"},
			{[]string{"audit", "list", "--user", "-1"}, "--user must be a positive number"},
			{[]string{"audit", "list", "--limit", "0"}, "--limit must be a positive number"},
			{[]string{"audit", "list", "--before", "-3"}, "--before must be a positive number"},
		} {
			if _, _, err := cli(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("sandchat %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
			}
		}
		for _, args := range [][]string{{"user", "--help"}, {"token", "--help"}, {"user", "erase", "--help"}, {"token", "create", "--help"}, {"audit", "list", "--help"}} {
			var out, errOut bytes.Buffer
			if err := run(ctx, args, &out, &errOut); err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Errorf("sandchat %s: %v", strings.Join(args, " "), err)
			}
			if !strings.Contains(out.String()+errOut.String(), "sandchat ") {
				t.Errorf("sandchat %s printed no usage", strings.Join(args, " "))
			}
		}
	})
}

// TestNoMigrate: serve --no-migrate leaves the schema to `sandchat migrate` and starts on
// a database at this build's version, and refuses one behind it, saying what to run.
func TestNoMigrate(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	env.node(func(c *Config, _ *Main) { c.NoMigrate = true }).as(t, "").must(200, "GET", "/healthz", nil, nil)
	m := env.node()
	ctx := context.Background()
	if _, err := m.DB.Exec(ctx, `update schema_version set version = version - 1`); err != nil {
		t.Fatal(err)
	}
	cfg := m.Config
	cfg.NoMigrate = true
	behind := NewMain(cfg, m.Log)
	err := behind.Run(ctx)
	behind.Close()
	want := fmt.Sprintf("the database is at version %d and this build needs %d: run `sandchat migrate` first", migrations.Latest()-1, migrations.Latest())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve --no-migrate on a database behind: %v, want %q", err, want)
	}
	if _, err := m.DB.Exec(ctx, `update schema_version set version = version + 1`); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"serve", "--help"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "-no-migrate") {
		t.Fatalf("serve --help: %v, lists no -no-migrate:\n%s", err, errOut.String())
	}
}
