package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" means valid
	}{
		{"defaults are valid", func(*Config) {}, ""},
		{"no live sessions", func(c *Config) { c.MaxLive = 0 }, "SANDCHAT_SANDBOX_MAX_LIVE: 0 is out of range"},
		{"pool max below pool", func(c *Config) { c.WarmPool, c.WarmPoolMax = 4, 2 }, "SANDCHAT_SANDBOX_WARM_POOL_MAX: 2 is below SANDCHAT_SANDBOX_WARM_POOL (4)"},
		{"too many spares", func(c *Config) { c.WarmSpares = 9 }, "SANDCHAT_SANDBOX_WARM_SPARES: 9 is out of range (0 to 8)"},
		{"unknown isolation", func(c *Config) { c.Isolation = "none" }, `SANDCHAT_SANDBOX_ISOLATION: "none" is not strict or process`},
		{"tiny state cap", func(c *Config) { c.MaxStateBytes = 10 }, "SANDCHAT_SANDBOX_MAX_STATE: 10 bytes is out of range (1 MiB to 4 GiB)"},
		{"timeout above max", func(c *Config) { c.Timeout = 10 * time.Minute }, "SANDCHAT_SANDBOX_MAX_TIMEOUT: 5m0s is below SANDCHAT_SANDBOX_TIMEOUT (10m0s)"},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, "SANDCHAT_SANDBOX_TIMEOUT: -1ns is out of range"},
		{"memory too small", func(c *Config) { c.MemoryBytes = 1 << 20 }, "SANDCHAT_SANDBOX_MEMORY: 1 MiB is out of range (64 MiB to 4 GiB)"},
		{"memory past wasm32", func(c *Config) { c.MemoryBytes = 5 << 30 }, "SANDCHAT_SANDBOX_MEMORY: 5 GiB is out of range"},
		{"no room for the runtime", func(c *Config) { c.RuntimeOverheadBytes = 1 << 20 }, "SANDCHAT_SANDBOX_RUNTIME_OVERHEAD: 1 MiB is out of range"},
		{"tiny output", func(c *Config) { c.MaxOutput = 10 }, "SANDCHAT_SANDBOX_MAX_OUTPUT: 10 bytes is out of range"},
		{"allowlist with scheme", func(c *Config) { c.NetworkAllow = []string{"http://example.com"} }, `SANDCHAT_SANDBOX_NETWORK_ALLOW: "http://example.com": want host or host:port`},
		{"allowlist bad port", func(c *Config) { c.NetworkAllow = []string{"example.com:99999"} }, `SANDCHAT_SANDBOX_NETWORK_ALLOW: "example.com:99999": bad port`},
		{"allowlist host and port", func(c *Config) { c.NetworkAllow = []string{"example.com:443", "127.0.0.1:8080", "[::1]:80"} }, ""},
		{"cdn not a url", func(c *Config) { c.PackageCDN = "cdn.example.com" }, `SANDCHAT_SANDBOX_PACKAGE_CDN: "cdn.example.com" is not official, off or an http(s) URL`},
		{"no package files per run", func(c *Config) { c.PackageRunMaxFiles = 0 }, "SANDCHAT_SANDBOX_PACKAGE_RUN_MAX_FILES: 0 is out of range"},
		{"no index requests per install", func(c *Config) { c.PipMaxIndexRequests = 0 }, "SANDCHAT_SANDBOX_PIP_MAX_INDEX_REQUESTS: 0 is out of range"},
		{"short ttl", func(c *Config) { c.SessionTTL = time.Second }, "SANDCHAT_SANDBOX_SESSION_TTL: 1s is out of range"},
		{"grace too short", func(c *Config) { c.Grace = time.Millisecond }, "SANDCHAT_SANDBOX_GRACE: 1ms is out of range"},
		{"negative queue", func(c *Config) { c.QueueDepth = -1 }, "SANDCHAT_SANDBOX_QUEUE_DEPTH: -1 is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.Timeout != 30*time.Second || c.MaxTimeout != 300*time.Second || c.MemoryBytes != 512<<20 || c.MaxOutput != 1<<20 ||
		c.MaxCode != 256<<10 || c.MaxArtifacts != 20 || c.MaxArtifactBytes != 10<<20 || c.SessionTTL != 24*time.Hour || len(c.NetworkAllow) != 0 {
		t.Fatalf("defaults drifted from DESIGN §4: %+v", c)
	}
}

func TestUnavailableWithoutRuntime(t *testing.T) {
	rdb := testRedis(t)
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no deno", func(c *Config) { c.DenoPath = "/nonexistent/deno" }, "Deno not found"},
		{"no pyodide", func(c *Config) { c.PyodideDir = t.TempDir() }, "Pyodide not found"},
		{"no runtime dir", func(c *Config) { c.RuntimeDir = t.TempDir() }, "runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(randomPrefix("unavail"))
			tt.mutate(&c)
			e, err := New(c, storeFor(rdb, c), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := e.Start(context.Background()); err != nil {
				t.Fatalf("Start must not fail for a missing runtime: %v", err)
			}
			ok, why := e.Available()
			if ok || !strings.Contains(why, tt.want) || !strings.Contains(why, "npm ci --prefix sandbox/runtime") {
				t.Fatalf("available %v, reason %q", ok, why)
			}
			if _, err := e.Execute(context.Background(), "k", Request{Code: "1"}); err == nil || !strings.Contains(err.Error(), "unavailable") {
				t.Fatalf("Execute: %v", err)
			}
			st := e.Status(context.Background())
			if st.Available || st.Reason == "" {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	e, _, _ := setup(t)
	if err := waitPool(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	st := e.Status(context.Background())
	if !st.Available || !st.Deno.Installed || st.Deno.Version == "" || st.Deno.Path == "" || st.Pyodide.Version == "" || st.Isolation == "" || st.WarmPool < 1 || st.Spares < 1 {
		t.Fatalf("%+v", st)
	}
}

func TestNumpySource(t *testing.T) {
	lock := `{"packages":{"numpy":{"file_name":"numpy-2.2.5-cp313-cp313-pyodide_2025_0_wasm32.whl"}}}`
	tests := []struct {
		name      string
		lock      string
		wheel     bool
		cdn       string
		ok        bool
		mentioned string
	}{
		{name: "no lock and no CDN", mentioned: "no package source can serve numpy"},
		{name: "no lock, a CDN", cdn: "https://cdn.example/pyodide/", ok: true},
		{name: "lock without the wheel", lock: lock, mentioned: "is not there"},
		{name: "lock and the wheel", lock: lock, wheel: true, ok: true, mentioned: "numpy-2.2.5"},
		{name: "lock, no wheel, a CDN", lock: lock, cdn: "https://cdn.example/pyodide/", ok: true},
		{name: "lock without numpy", lock: `{"packages":{}}`, mentioned: "not in"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.lock != "" {
				_ = os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), []byte(tc.lock), 0o644)
			}
			if tc.wheel {
				_ = os.WriteFile(filepath.Join(dir, "numpy-2.2.5-cp313-cp313-pyodide_2025_0_wasm32.whl"), []byte("PK"), 0o644)
			}
			msg, ok := numpySource(Config{Settings: pkgs.Settings{PackageDir: dir, PackageCDN: tc.cdn}})
			if ok != tc.ok || !strings.Contains(msg, tc.mentioned) {
				t.Errorf("numpySource = %q, %v", msg, ok)
			}
		})
	}
}

// TestPackageSourceDefault: with no setting, packages come from the official
// distribution of the pinned Pyodide; "off" keeps to the package dir.
func TestPackageSourceDefault(t *testing.T) {
	c := Locate(DefaultConfig())
	requireRuntime(t, c)
	if want := "https://cdn.jsdelivr.net/pyodide/v" + pyodideVersion(c.PyodideDir) + "/full/"; c.PackageCDN != want {
		t.Fatalf("default package source %q, want %q", c.PackageCDN, want)
	}
	off := DefaultConfig()
	off.PackageCDN = CDNOff
	if err := off.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := Locate(off).PackageCDN; got != "" {
		t.Fatalf("off: %q", got)
	}
}

// TestPackageSettingsOnce: the package settings are described once, in pkgs.Settings,
// which Config embeds and the fetcher reads as they are: no field of Config repeats
// one, so nothing copies them field by field.
func TestPackageSettingsOnce(t *testing.T) {
	ct, st := reflect.TypeFor[Config](), reflect.TypeFor[pkgs.Settings]()
	if f, ok := ct.FieldByName("Settings"); !ok || !f.Anonymous || f.Type != st {
		t.Fatalf("Config does not embed pkgs.Settings")
	}
	for i := range ct.NumField() {
		if f := ct.Field(i); !f.Anonymous {
			if _, ok := st.FieldByName(f.Name); ok {
				t.Errorf("Config.%s repeats a package setting", f.Name)
			}
		}
	}
	c := DefaultConfig()
	c.PipMaxIndexRequests = 7
	if c.Settings.PipMaxIndexRequests != 7 {
		t.Fatalf("a package setting set on Config does not reach the fetcher's")
	}
}
