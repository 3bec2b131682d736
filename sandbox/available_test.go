package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

func TestAvailablePackages(t *testing.T) {
	dir := t.TempDir()
	lock := `{"packages": {
		"tinyfmt": {"name": "tinyfmt", "file_name": "tinyfmt-1.0-py3-none-any.whl", "package_type": "package"},
		"numpy": {"name": "numpy", "file_name": "numpy-2.0-cp313-pyodide.whl", "package_type": "package"},
		"libopenblas": {"name": "libopenblas", "file_name": "libopenblas.zip", "package_type": "shared_library"}}}`
	if err := os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tinyfmt-1.0-py3-none-any.whl", "libopenblas.zip"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{RuntimeDir: dir, PyodideDir: dir, DenoPath: "/none", Settings: pkgs.Settings{PackageDir: dir}}
	if got := AvailablePackages(cfg); !reflect.DeepEqual(got, []string{"tinyfmt"}) {
		t.Fatalf("local mirror: %v", got)
	}
	cfg.PackageCDN = "https://cdn.example/pyodide/"
	if got := AvailablePackages(cfg); !reflect.DeepEqual(got, []string{"numpy", "tinyfmt"}) {
		t.Fatalf("with a CDN: %v", got)
	}
}
