package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs/pkgstest"
)

// buildExtension compiles testdata/ext.c into a CPython extension module named module
// for Pyodide's wasm32: a side module with its dylink.0 section, as Emscripten builds
// them. It needs clang with the wasm32 target and wasm-ld (Debian: clang lld, which
// ./.ci/services installs); without them the test fails, it does not skip.
func buildExtension(t testing.TB, module string) []byte {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build the test's compiled extension: apt-get install clang lld (./.ci/services does): %v", err)
	}
	ld, err := exec.LookPath("wasm-ld")
	if err != nil {
		t.Fatalf("wasm-ld is needed to link the test's compiled extension: apt-get install lld (./.ci/services does): %v", err)
	}
	dir := t.TempDir()
	obj, so := filepath.Join(dir, "ext.o"), filepath.Join(dir, "ext.so")
	for _, cmd := range [][]string{
		{clang, "--target=wasm32-unknown-emscripten", "-fPIC", "-O2", "-DMODULE=" + module, "-c", "testdata/ext.c", "-o", obj},
		{ld, "--experimental-pic", "-shared", "--no-entry", "-o", so, obj},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	b, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b[:min(len(b), 64)]), "dylink.0") {
		t.Fatalf("%s has no dylink.0 section: Pyodide would not load it", so)
	}
	return b
}

// compiledTag is the platform of the pinned Pyodide's compiled wheels (PEP 783), as its
// lock file's info says: cp314, ABI 2026_0.
const compiledTag = "cp314-cp314-pyemscripten_2026_0_wasm32"

// extWheel is module as a wheel built for Pyodide: the extension under the suffix
// CPython gives extension modules on Emscripten.
func extWheel(t testing.TB, module, version string) testWheel {
	return testWheel{name: module, version: version, tag: compiledTag,
		files: map[string]string{module + ".cpython-314-wasm32-emscripten.so": string(buildExtension(t, module))}}
}

// TestCompiledWheel: micropip installs a wheel built for the sessions' Pyodide from the
// package index, preferred over the pure-Python wheel of the same release; the session
// that loaded the extension is kept and restored (by replay) with it.
func TestCompiledWheel(t *testing.T) {
	t.Parallel()
	ext := extWheel(t, "sandchat_ext", "1.0")
	pure := testWheel{name: "sandchat_ext", version: "1.0", files: map[string]string{"sandchat_ext.py": "def triple(n):\n    return 'pure'\n"}}
	idx := newPipIndex(t, pkgstest.Release{Wheels: []pkgstest.Wheel{pure.wheel(), ext.wheel()}})
	e, _ := newEngine(t, withPip(idx, readableTempDir(t)))
	code := "import micropip\nawait micropip.install('sandchat-ext')\nimport sandchat_ext\n(sandchat_ext.triple(14), sandchat_ext.__file__.rsplit('/', 1)[1])"
	r := mustSucceed(t, e, "ext", code)
	if want := "(42, 'sandchat_ext.cpython-314-wasm32-emscripten.so')"; resultOf(r) != want {
		t.Fatalf("got %s, want %s (stderr %q)", resultOf(r), want, r.Stderr)
	}
	checkpointNow(t, e, "ext")
	evictLive(t, e, "ext")
	r = mustSucceed(t, e, "ext", "sandchat_ext.triple(5)")
	if resultOf(r) != "15" || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("after a restore: %s from %s (stderr %q)", resultOf(r), r.Session.RestoredFrom, r.Stderr)
	}
}

// TestCompiledLockPackage: a compiled package of the Pyodide distribution (its lock
// file) loads by its import, and a session that imported it restores with it.
func TestCompiledLockPackage(t *testing.T) {
	t.Parallel()
	shared, _, _ := setup(t)
	cdn := serveCDN(t, shared.cfg.PyodideDir, []testWheel{extWheel(t, "sandchat_extlock", "1.0")}, nil)
	e, _ := newEngine(t, func(c *Config) {
		c.PackageDir, c.PackageCDN, c.PackageCacheDir = cdn.lockDir, cdn.srv.URL+"/pyodide/", readableTempDir(t)
	})
	r := mustSucceed(t, e, "lock", "import sandchat_extlock\nsandchat_extlock.triple(7)")
	if resultOf(r) != "21" {
		t.Fatalf("got %s (stderr %q)", resultOf(r), r.Stderr)
	}
	checkpointNow(t, e, "lock")
	evictLive(t, e, "lock")
	r = mustSucceed(t, e, "lock", "sandchat_extlock.triple(3)")
	if resultOf(r) != "9" || r.Session.RestoredFrom != FromReplay {
		t.Fatalf("after a restore: %s from %s (stderr %q)", resultOf(r), r.Session.RestoredFrom, r.Stderr)
	}
}
