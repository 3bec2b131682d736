package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each case runs hostile Python; its `probe` must print only "contained" lines. After
// every case, a neighbour session must still hold its state, so a break-out that takes
// the engine down fails too.
func TestSecurity(t *testing.T) {
	e, _, key := setup(t)
	t.Setenv("SANDCHAT_TEST_SECRET", "s3cret-value")
	marker := filepath.Join(t.TempDir(), "pwned")
	wd, _ := os.Getwd()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reachable") }))
	defer srv.Close()

	neighbour := key("neighbour")
	mustSucceed(t, e, neighbour, "secret = 'neighbour-only'")

	// attempt runs each snippet and prints "contained" when it raised, or what it got.
	const attempt = `
async def attempt(label, fn):
    try:
        r = fn()
        if hasattr(r, '__await__'):
            r = await r
        print(label, 'contained (nothing)' if r is None else 'LEAKED ' + repr(r)[:200])
    except BaseException as e:
        print(label, 'contained', type(e).__name__)
`
	tests := []struct {
		name string
		code string
	}{
		{"read /etc/passwd", `import js
await attempt('py', lambda: open('/etc/passwd').read())
await attempt('js', lambda: js.Deno.readTextFileSync('/etc/passwd'))
await attempt('fetch', lambda: js.fetch('file:///etc/passwd'))`},
		{"read server files", fmt.Sprintf(`import js
await attempt('go.mod', lambda: js.Deno.readTextFileSync(%q))
await attempt('host.ts', lambda: js.Deno.readTextFileSync(%q))
await attempt('proc', lambda: js.Deno.readTextFileSync('/proc/self/environ'))`, filepath.Join(wd, "..", "go.mod"), filepath.Join(e.cfg.RuntimeDir, "host.ts"))},
		{"write outside the sandbox", fmt.Sprintf(`import js
await attempt('write', lambda: js.Deno.writeTextFileSync(%q, 'x'))
await attempt('mkdir', lambda: js.Deno.mkdirSync('/tmp/sandchat-escape'))`, marker)},
		{"read environment variables", `import js, os
await attempt('env', lambda: js.Deno.env.get('SANDCHAT_TEST_SECRET'))
await attempt('envobj', lambda: js.Deno.env.toObject())
await attempt('osenv', lambda: os.environ['SANDCHAT_TEST_SECRET'])`},
		{"start processes", `import js, subprocess
await attempt('command', lambda: js.Deno.Command.new('/bin/sh').outputSync())
await attempt('subprocess', lambda: subprocess.run(['ls']))
await attempt('system', lambda: __import__('os').system('ls') and 1/0)`},
		{"network while off", fmt.Sprintf(`import js
from pyodide.http import pyfetch
await attempt('pyfetch', lambda: pyfetch(%q))
await attempt('fetch', lambda: js.fetch(%q))
await attempt('connect', lambda: js.Deno.connect(js.JSON.parse('{"port": 6379}')))`, srv.URL, srv.URL)},
		{"exit the host", `import js
await attempt('exit', lambda: js.Deno.exit(1))
await attempt('eval', lambda: js.eval('Deno.exit(2)'))
await attempt('kill', lambda: js.Deno.kill(1, 'SIGKILL'))`},
		{"close or crash the worker", `import js
await attempt('close', lambda: js.self.close())
await attempt('eval', lambda: js.eval('self.close()'))
js.eval("Promise.reject(new Error('unhandled'))")
js.eval("setTimeout(() => { throw new Error('uncaught, later') }, 0)")
print('async errors contained')`},
		{"spawn workers", `import js
await attempt('worker', lambda: js.Worker.new('data:text/javascript,1'))
await attempt('eval', lambda: js.eval("new Worker('data:text/javascript,1', {type: 'module'})"))`},
		{"read another session's variables", `import js, gc
await attempt('globals', lambda: secret)
await attempt('gc', lambda: [o for o in gc.get_objects() if isinstance(o, str) and o == 'neighbour-only'][0])
await attempt('js', lambda: js.eval('globalThis.secret'))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := key(tt.name)
			mustSucceed(t, e, k, attempt)
			var streamed strings.Builder
			r, err := e.Execute(context.Background(), k, Request{Code: tt.code, OnOutput: func(_, c string) { streamed.WriteString(c) }})
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			t.Logf("status %s stdout:\n%s", r.Status, r.Stdout)
			if r.Status != StatusSuccess {
				t.Fatalf("status %s %+v", r.Status, r.Error)
			}
			for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if !strings.Contains(line, "contained") || strings.Contains(line, "LEAKED") || strings.Contains(line, "s3cret") {
					t.Errorf("not contained: %s", line)
				}
			}
			if strings.Contains(r.Stdout, "FORGED") || strings.Contains(streamed.String(), "FORGED") {
				t.Errorf("a forged message reached the caller")
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the sandbox wrote %s", marker)
			}
			// The engine, this session and its neighbour all keep working.
			if got := resultOf(mustSucceed(t, e, k, "1 + 1")); got != "2" {
				t.Errorf("session after the attempt: %s", got)
			}
			if got := resultOf(mustSucceed(t, e, neighbour, "secret")); got != "'neighbour-only'" {
				t.Errorf("neighbour after the attempt: %s", got)
			}
		})
	}
}

func TestNetworkAllowlist(t *testing.T) {
	t.Parallel()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from allowed") }))
	defer allowed.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "should not be reached") }))
	defer other.Close()
	host := strings.TrimPrefix(allowed.URL, "http://")
	e, _ := newEngine(t, func(c *Config) { c.NetworkAllow = []string{host} })

	tests := []struct {
		name, code, want string
	}{
		{"allowed host answers pyfetch", fmt.Sprintf("from pyodide.http import pyfetch\nr = await pyfetch(%q)\nawait r.string()", allowed.URL), "'hello from allowed'"},
		{"allowed host answers js fetch", fmt.Sprintf("import js\nr = await js.fetch(%q)\nawait r.text()", allowed.URL), "'hello from allowed'"},
		{"another port is refused", fmt.Sprintf("from pyodide.http import pyfetch\ntry:\n    await pyfetch(%q)\n    r = 'reached'\nexcept Exception as e:\n    r = 'refused' if 'NotCapable' in str(e) or 'net' in str(e) else str(e)\nr", other.URL), "'refused'"},
		{"another host is refused", "import js\ntry:\n    await js.fetch('http://localhost:6379/')\n    r = 'reached'\nexcept Exception as e:\n    r = 'refused' if 'NotCapable' in str(e) else str(e)\nr", "'refused'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustSucceed(t, e, "net", tt.code)
			if got := resultOf(r); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}
