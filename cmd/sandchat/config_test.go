package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestConfigRefusesBadValues: every setting out of its bounds stops the process with a
// message naming the setting and the text it was given.
func TestConfigRefusesBadValues(t *testing.T) {
	cases := []struct {
		name, env, value, want string
	}{
		{"stale limit of a nanosecond", "TURN_STALE_AFTER", "1ns", "SANDCHAT_TURN_STALE_AFTER: 1ns is out of range"},
		{"stale limit shorter than a heartbeat", "TURN_STALE_AFTER", "1ms", "SANDCHAT_TURN_STALE_AFTER: 1ms is out of range"},
		{"event retention of a nanosecond", "EVENT_RETENTION", "1ns", "SANDCHAT_EVENT_RETENTION: 1ns is out of range"},
		{"empty Redis prefix", "REDIS_PREFIX", "", "SANDCHAT_REDIS_PREFIX: must not be empty"},
		{"unknown tool id", "TOOLS_DISABLED", "swarm_mode,pyodide", `SANDCHAT_TOOLS_DISABLED: "pyodide" is not an internal tool id`},
		{"overflowing size", "SANDBOX_MEMORY", "9999999999999GiB", `SANDCHAT_SANDBOX_MEMORY: "9999999999999GiB" is too large`},
		{"non-numeric rate", "RATE_MESSAGES", "ten", `SANDCHAT_RATE_MESSAGES: "ten" is not a whole number`},
		{"conversation quota below a MiB", "CONVERSATION_QUOTA", "512KiB", "SANDCHAT_CONVERSATION_QUOTA: 512 KiB is out of range (1 MiB to 1 TiB)"},
		{"non-numeric queue", "WS_QUEUE_BYTES", "lots", `SANDCHAT_WS_QUEUE_BYTES: "lots" is not a size`},
		{"non-numeric retries", "LLM_MAX_RETRIES", "2x", `SANDCHAT_LLM_MAX_RETRIES: "2x" is not a whole number`},
		{"non-numeric sandbox count", "SANDBOX_WARM_POOL", "two", `SANDCHAT_SANDBOX_WARM_POOL: "two" is not a whole number`},
		{"pip neither on nor off", "SANDBOX_PIP", "maybe", `SANDCHAT_SANDBOX_PIP: "maybe" is not on or off`},
		{"sandbox default neither on nor off", "SANDBOX_DEFAULT", "yes", `SANDCHAT_SANDBOX_DEFAULT: "yes" is not on or off`},
		{"pip allowlist entry that is no name", "SANDBOX_PIP_ALLOW", "ok,../evil", `SANDCHAT_SANDBOX_PIP_ALLOW: "../evil" is not a project name or *`},
		{"preload entry that is no module", "SANDBOX_PRELOAD", "numpy,os;x", `SANDCHAT_SANDBOX_PRELOAD: Preload entry "os;x" is not a module name`},
		{"package cache bound too small", "SANDBOX_PACKAGE_CACHE_MAX", "1MiB", "SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX: 1 MiB is out of range (16 MiB to 1 TiB)"},
		{"retention below a day", "RETENTION", "1h", "SANDCHAT_RETENTION: 1h0m0s is out of range (24h0m0s to"},
		{"retention neither off nor a duration", "RETENTION", "never", `SANDCHAT_RETENTION: "never" is not a duration`},
		{"a proxy header whose entries are no addresses", "PROXY_HEADER", "forwarded", "SANDCHAT_PROXY_HEADER: the Forwarded header (RFC 7239) is not read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SANDCHAT_"+tc.env, tc.value)
			var cfg Config
			fs := newFlagSet("serve", "", io.Discard)
			finish := cfg.bindServe(fs)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := finish()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SANDCHAT_%s=%q: %v, want an error containing %q", tc.env, tc.value, err, tc.want)
			}
		})
	}
	t.Run("defaults and a known tool id pass", func(t *testing.T) {
		t.Setenv("SANDCHAT_TOOLS_DISABLED", "swarm_mode")
		t.Setenv("SANDCHAT_TURN_STALE_AFTER", "5s")
		t.Setenv("SANDCHAT_RETENTION", "2160h")
		var cfg Config
		fs := newFlagSet("serve", "", io.Discard)
		finish := cfg.bindServe(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if err := finish(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSettingsTable: every setting has a variable, a flag (unless it is a secret) and
// help, shows in serve --help, and a bad value of every parsed kind, by flag or by
// variable, stops the process with a message naming the variable and the text given.
func TestSettingsTable(t *testing.T) {
	var cfg Config
	var help bytes.Buffer
	fs := newFlagSet("serve", "", &help)
	cfg.bindServe(fs)
	fs.Usage()
	envs, flags := map[string]bool{}, map[string]bool{}
	for _, s := range settings() {
		if !regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(s.Env) || envs[s.Env] {
			t.Errorf("SANDCHAT_%s: a variable name must be upper case and unique", s.Env)
		}
		envs[s.Env] = true
		if strings.TrimSpace(s.Help) == "" || s.Set == nil || s.Kind == "" {
			t.Errorf("SANDCHAT_%s: no help, parser or kind", s.Env)
		}
		if s.EnvOnly {
			if fs.Lookup(s.FlagName()) != nil {
				t.Errorf("SANDCHAT_%s is read from the environment only, yet has a flag", s.Env)
			}
			continue
		}
		if flags[s.FlagName()] {
			t.Errorf("flag -%s is declared twice", s.FlagName())
		}
		flags[s.FlagName()] = true
		if f := fs.Lookup(s.FlagName()); f == nil || !strings.Contains(f.Usage, "SANDCHAT_"+s.Env) {
			t.Errorf("SANDCHAT_%s: no flag -%s naming it", s.Env, s.FlagName())
		}
		if !strings.Contains(help.String(), "-"+s.FlagName()) || !strings.Contains(help.String(), "(SANDCHAT_"+s.Env+")") {
			t.Errorf("serve --help does not list -%s (SANDCHAT_%s)", s.FlagName(), s.Env)
		}
	}

	bad := map[sandchat.Kind]string{sandchat.KindBoolean: "maybe", sandchat.KindWholeNumber: "ten", sandchat.KindSize: "lots", sandchat.KindDuration: "soon"}
	parse := func(t *testing.T, args ...string) error {
		var cfg Config
		fs := newFlagSet("serve", "", io.Discard)
		finish := cfg.bindServe(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return finish()
	}
	seen := map[sandchat.Kind]bool{}
	for _, s := range settings() {
		value, ok := bad[s.Kind]
		if !ok {
			continue
		}
		seen[s.Kind] = true
		want := fmt.Sprintf("SANDCHAT_%s: %q is not ", s.Env, value)
		t.Run(s.Env+" by flag", func(t *testing.T) {
			if err := parse(t, "-"+s.FlagName()+"="+value); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("-%s=%s: %v, want an error containing %q", s.FlagName(), value, err, want)
			}
		})
		t.Run(s.Env+" by variable", func(t *testing.T) {
			t.Setenv("SANDCHAT_"+s.Env, value)
			if err := parse(t); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SANDCHAT_%s=%s: %v, want an error containing %q", s.Env, value, err, want)
			}
		})
	}
	for k := range bad {
		if !seen[k] {
			t.Errorf("no setting of kind %s: the bad value table is stale", k)
		}
	}
	t.Run("every default passes", func(t *testing.T) {
		if err := parse(t); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSettingsInREADME: every setting has its row in the README's configuration table
// (where "…_X" in a row stands for the row's first variable's group, SANDCHAT_SANDBOX_X).
func TestSettingsInREADME(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	name := regexp.MustCompile("`((?:SANDCHAT|…)_[A-Z0-9_]+)`")
	group := regexp.MustCompile(`^SANDCHAT_[A-Z]+`)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `SANDCHAT_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		g := ""
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			v := m[1]
			if strings.HasPrefix(v, "…") {
				v = g + strings.TrimPrefix(v, "…")
			} else if g == "" {
				g = group.FindString(v)
			}
			listed[v] = true
		}
	}
	for _, s := range settings() {
		if !listed["SANDCHAT_"+s.Env] {
			t.Errorf("SANDCHAT_%s has no row in the README's configuration table", s.Env)
		}
	}
}
