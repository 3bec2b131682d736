package sandbox

import (
	"fmt"
	"github.com/sandchat/sandchat/migrations/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPackageFetchPrivate: a session sees only the wheels it loaded, never the ones
// another session fetched into the shared cache (by import or by micropip).
func TestPackageFetchPrivate(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	cdn := newCDN(t, shared.cfg.PyodideDir)
	idx := newPipIndex(t)
	cache := readableTempDir(t)
	e, _ := newEngine(t, withPip(idx, cache, func(c *Config) { c.PackageDir, c.PackageCDN = cdn.lockDir, cdn.srv.URL+"/pyodide/" }))
	mustSucceed(t, e, "b", "None")
	r := mustSucceed(t, e, "a", "import sandchat_cdn\n"+pipInstallMain)
	if resultOf(r) != "'HI FROM PIP!'" {
		t.Fatalf("got %s", resultOf(r))
	}
	var wheels []string
	_ = filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".whl") && !strings.Contains(p, "/sessions/") {
			rel, _ := filepath.Rel(cache, p)
			wheels = append(wheels, rel)
		}
		return nil
	})
	if len(wheels) != 4 {
		t.Fatalf("the cache holds %v", wheels)
	}
	look := fmt.Sprintf(`import js
root = %q
seen, opened = [], []
def walk(p):
    try:
        items = js.Array.from_(js.Deno.readDirSync(p))
    except Exception:
        return
    for d in items:
        seen.append((p + '/' + d.name)[len(root):])
        if d.isDirectory:
            walk(p + '/' + d.name)
walk(root)
for rel in %q.split():
    try:
        js.Deno.readFileSync(root + '/' + rel)
        opened.append(rel)
    except Exception:
        pass
sorted(seen), opened`, cache, strings.Join(wheels, " "))
	for _, key := range []string{"b", "a"} {
		r := mustSucceed(t, e, key, look)
		if got := resultOf(r); got != "(['/pyodide-lock.json'], [])" {
			t.Errorf("session %s sees %s", key, got)
		}
	}
	t.Run("a session still loads the same packages through its own view", func(t *testing.T) {
		before := cdn.requests()
		r := mustSucceed(t, e, "b", "import sandchat_cdn\nsandchat_cdn.hello()")
		if resultOf(r) != "'hi from the cdn, hi from the cdn'" || cdn.requests() != before {
			t.Fatalf("got %s with %d requests", resultOf(r), cdn.requests()-before)
		}
	})
	t.Run("without bubblewrap a session reads its view where it is, and only that", func(t *testing.T) {
		e, _ := newEngine(t, withPip(idx, cache, func(c *Config) {
			c.PackageDir, c.PackageCDN, c.Isolation = cdn.lockDir, cdn.srv.URL+"/pyodide/", IsolationProcess
		}))
		if r := mustSucceed(t, e, "p", "import sandchat_cdn\n"+pipInstallMain); resultOf(r) != "'HI FROM PIP!'" {
			t.Fatalf("got %s", resultOf(r))
		}
		if got := resultOf(mustSucceed(t, e, "p", look)); got != "([], [])" {
			t.Errorf("the session sees %s", got)
		}
	})
	t.Run("a session's view goes with its process", func(t *testing.T) {
		ids := []string{liveOf(t, e, "a").Process().ID(), liveOf(t, e, "b").Process().ID()}
		evictLive(t, e, "a")
		evictLive(t, e, "b")
		for _, id := range ids {
			testenv.Eventually(t, 10*time.Second, "the view of process "+id+" gone with it", func() bool {
				return !fileExists(filepath.Join(cache, "sessions", id))
			})
		}
	})
}
