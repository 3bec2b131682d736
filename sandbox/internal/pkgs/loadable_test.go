package pkgs

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestLoadable: a package is loadable when it and its dependencies are in the mirror
// or the cache, or when the package source answers; a source that does not answer is
// asked once and remembered, and a deployment with no source has only what it holds.
func TestLoadable(t *testing.T) {
	var heads atomic.Int64
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			heads.Add(1)
		}
	}))
	t.Cleanup(cdn.Close)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String() + "/"
	dead.Close()

	mirror := t.TempDir()
	lock := `{"info": {"python": "3.13.2"}, "packages": {
		"pandas": {"name": "pandas", "file_name": "pandas-2.0-cp313-pyodide.whl", "depends": ["numpy"]},
		"numpy": {"name": "numpy", "file_name": "numpy-2.0-cp313-pyodide.whl"},
		"tinyfmt": {"name": "tinyfmt", "file_name": "tinyfmt-1.0-py3-none-any.whl"}}}`
	for name, body := range map[string]string{"pyodide-lock.json": lock, "tinyfmt-1.0-py3-none-any.whl": "w", "numpy-2.0-cp313-pyodide.whl": "w"} {
		if err := os.WriteFile(filepath.Join(mirror, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fetcher := func(source string) *Fetcher {
		f, err := New(Settings{PackageDir: mirror, PackageCDN: source, PackageCacheDir: t.TempDir(), PackageCacheMaxBytes: 1 << 30, PackageCacheMaxFiles: 100},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ctx := context.Background()

	offline := fetcher("")
	if !offline.Loadable(ctx, "tinyfmt") || !offline.Loadable(ctx, "numpy") {
		t.Error("what the mirror holds is not loadable")
	}
	if offline.Loadable(ctx, "pandas") || offline.Loadable(ctx, "nosuch") {
		t.Error("with no source, a package missing from the mirror (or from the lock) is loadable")
	}

	online := fetcher(cdn.URL + "/")
	if !online.Loadable(ctx, "pandas") || !online.Loadable(ctx, "pandas") || heads.Load() != 1 {
		t.Errorf("a source that answers: pandas not loadable, or asked %d times for two looks, want once", heads.Load())
	}

	unreachable := fetcher(deadURL)
	if unreachable.Loadable(ctx, "pandas") || unreachable.Loadable(ctx, "pandas") || unreachable.Requests() != 1 {
		t.Errorf("a source that does not answer: pandas loadable, or asked %d times, want once", unreachable.Requests())
	}
	if !unreachable.Loadable(ctx, "numpy") {
		t.Error("what the mirror holds is loadable whatever the source")
	}
}
