package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
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
		{"conversation quota below a MiB", "CONVERSATION_QUOTA", "512KiB", "SANDCHAT_CONVERSATION_QUOTA: 524288 bytes is not between 1 MiB and 1 TiB"},
		{"non-numeric queue", "WS_QUEUE_BYTES", "lots", `SANDCHAT_WS_QUEUE_BYTES: "lots" is not a whole number`},
		{"non-numeric retries", "LLM_MAX_RETRIES", "2x", `SANDCHAT_LLM_MAX_RETRIES: "2x" is not a whole number`},
		{"non-numeric sandbox count", "SANDBOX_WARM_POOL", "two", `SANDCHAT_SANDBOX_WARM_POOL: "two" is not a whole number`},
		{"pip neither on nor off", "SANDBOX_PIP", "maybe", `SANDCHAT_SANDBOX_PIP: "maybe" is not on or off`},
		{"sandbox default neither on nor off", "SANDBOX_DEFAULT", "yes", `SANDCHAT_SANDBOX_DEFAULT: "yes" is not on or off`},
		{"pip allowlist entry that is no name", "SANDBOX_PIP_ALLOW", "ok,../evil", `sandbox pip allowlist entry "../evil"`},
		{"preload entry that is no module", "SANDBOX_PRELOAD", "numpy,os;x", `sandbox preload: Preload entry "os;x" is not a module name`},
		{"package cache bound too small", "SANDBOX_PACKAGE_CACHE_MAX", "1MiB", "sandbox package cache bound must be at least 16 MiB"},
		{"retention below a day", "RETENTION", "1h", "SANDCHAT_RETENTION: 1h0m0s is out of range (24h0m0s to"},
		{"retention neither off nor a duration", "RETENTION", "never", `SANDCHAT_RETENTION: "never" is not a positive duration`},
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
		if !regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(s.env) || envs[s.env] {
			t.Errorf("SANDCHAT_%s: a variable name must be upper case and unique", s.env)
		}
		envs[s.env] = true
		if strings.TrimSpace(s.help) == "" || s.into.set == nil || s.into.kind == "" {
			t.Errorf("SANDCHAT_%s: no help, parser or kind", s.env)
		}
		if s.envOnly {
			if fs.Lookup(s.flagName()) != nil {
				t.Errorf("SANDCHAT_%s is read from the environment only, yet has a flag", s.env)
			}
			continue
		}
		if flags[s.flagName()] {
			t.Errorf("flag -%s is declared twice", s.flagName())
		}
		flags[s.flagName()] = true
		if f := fs.Lookup(s.flagName()); f == nil || !strings.Contains(f.Usage, "SANDCHAT_"+s.env) {
			t.Errorf("SANDCHAT_%s: no flag -%s naming it", s.env, s.flagName())
		}
		if !strings.Contains(help.String(), "-"+s.flagName()) || !strings.Contains(help.String(), "(SANDCHAT_"+s.env+")") {
			t.Errorf("serve --help does not list -%s (SANDCHAT_%s)", s.flagName(), s.env)
		}
	}

	bad := map[kind]string{kindBoolean: "maybe", kindWholeNumber: "ten", kindSize: "lots", kindDuration: "soon"}
	parse := func(t *testing.T, args ...string) error {
		var cfg Config
		fs := newFlagSet("serve", "", io.Discard)
		finish := cfg.bindServe(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return finish()
	}
	seen := map[kind]bool{}
	for _, s := range settings() {
		value, ok := bad[s.into.kind]
		if !ok {
			continue
		}
		seen[s.into.kind] = true
		want := fmt.Sprintf("SANDCHAT_%s: %q is not ", s.env, value)
		t.Run(s.env+" by flag", func(t *testing.T) {
			if err := parse(t, "-"+s.flagName()+"="+value); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("-%s=%s: %v, want an error containing %q", s.flagName(), value, err, want)
			}
		})
		t.Run(s.env+" by variable", func(t *testing.T) {
			t.Setenv("SANDCHAT_"+s.env, value)
			if err := parse(t); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SANDCHAT_%s=%s: %v, want an error containing %q", s.env, value, err, want)
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
