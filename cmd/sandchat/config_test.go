package main

import (
	"io"
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
		{"non-numeric queue", "WS_QUEUE_BYTES", "lots", `SANDCHAT_WS_QUEUE_BYTES: "lots" is not a whole number`},
		{"non-numeric retries", "LLM_MAX_RETRIES", "2x", `SANDCHAT_LLM_MAX_RETRIES: "2x" is not a whole number`},
		{"non-numeric sandbox count", "SANDBOX_WARM_POOL", "two", `SANDCHAT_SANDBOX_WARM_POOL: "two" is not a whole number`},
		{"pip neither on nor off", "SANDBOX_PIP", "maybe", `SANDCHAT_SANDBOX_PIP: "maybe" is not on or off`},
		{"pip allowlist entry that is no name", "SANDBOX_PIP_ALLOW", "ok,../evil", `sandbox pip allowlist entry "../evil"`},
		{"preload entry that is no module", "SANDBOX_PRELOAD", "numpy,os;x", `sandbox preload entry "os;x"`},
		{"package cache bound too small", "SANDBOX_PACKAGE_CACHE_MAX", "1MiB", "sandbox package cache bound must be at least 16 MiB"},
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
