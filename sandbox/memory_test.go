package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMemoryWithinTheCap: Python may use what the session was granted and the session
// still saves; past it Python gets MemoryError; and neither grows the saved state for
// good.
func TestMemoryWithinTheCap(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, nil)
	ctx := context.Background()
	cases := []struct{ name, code, want string }{
		{"a 200 MiB string", "a = 'x' * (200 * 1024 * 1024)\nlen(a)", "209715200"},
		{"a list of 100M items", "try:\n    a = [0] * (100 * 1024 * 1024)\n    r = len(a)\nexcept MemoryError:\n    r = 'MemoryError'\nr", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "mem:" + c.name
			mustSucceed(t, e, key, "keep = 'still here'")
			small := checkpointNow(t, e, key).StateBytes
			// A generous limit: the cgroup v2 VM faults pages in slowly, and the case is
			// about the outcome (success or MemoryError), not the time.
			r, err := e.Execute(context.Background(), key, Request{Code: c.code, Timeout: 120 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != StatusSuccess {
				t.Fatalf("status %s error %+v: within the cap a run succeeds or raises MemoryError", r.Status, r.Error)
			}
			if got := resultOf(r); c.want != "" && got != c.want || c.want == "" && got != "104857600" && got != "'MemoryError'" {
				t.Fatalf("result %s", got)
			}
			info := checkpointNow(t, e, key)
			if !info.Live {
				t.Fatal("the session's process did not survive its checkpoint")
			}
			mustSucceed(t, e, key, "del a\nimport gc; gc.collect()")
			evictLive(t, e, key)
			r = mustSucceed(t, e, key, "keep")
			if resultOf(r) != "'still here'" {
				t.Fatalf("after eviction: %s", resultOf(r))
			}
			info, err = e.Session(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("state: %d bytes before, %d after (mode %s)", small, info.StateBytes, info.Mode)
			if strings.Contains(r.Stderr, "memory limit") {
				t.Fatalf("stderr %q", r.Stderr)
			}
		})
	}
}

// growImported is a WebAssembly module that imports env.memory and exports grow(pages),
// the memory.grow instruction: no JavaScript hook sees that growth. asSide adds the
// dylink.0 section that makes it a shared library Pyodide's dlopen (ctypes) loads,
// handing it the interpreter's memory.
func growImported(asSide bool) string {
	h := "0061736d01000000"
	if asSide {
		h += "000f0864796c696e6b2e30010400000000"
	}
	return h + "01060160017f017f" + "020f0103656e76066d656d6f7279020001" + "03020100" + "070801046772" + "6f770000" + "0a08010600200040000b"
}

// TestMemoryCapHoldsForEveryPath: the interpreter's memory can be reached from Python
// (Pyodide's module object holds it; a hook on Memory.prototype sees it grow; a shared
// library loaded with ctypes imports it). Whichever way code reaches it and grows it,
// it holds no more than the session's cap: the growth is refused, Python's next large
// allocation is a MemoryError, and the session keeps its state. A 1.5 GiB bytearray is
// a MemoryError too.
func TestMemoryCapHoldsForEveryPath(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.MemoryBytes = 512 << 20 })
	const cap = 512 << 20
	// Each way reaches the memory as M; then a module of the user's imports it and grows
	// it to 1 GiB (the memory.grow instruction), and Python allocates what that would hold.
	grow := `
from pyodide.ffi import to_js
inst = js.WebAssembly.Instance.new(js.WebAssembly.Module.new(to_js(bytes.fromhex("` + growImported(false) + `"))), js.eval("(m) => ({env: {memory: m}})")(M))
inst.exports.grow((1 << 30) // 65536 - M.buffer.byteLength // 65536)
size = M.buffer.byteLength
del inst, M
`
	const allocate = `
try:
    big = bytearray(700 << 20)
    got = 'allocated 700 MiB'
except MemoryError:
    got = 'MemoryError'
(got, size >> 20)`
	cases := []struct{ name, code string }{
		{"Pyodide's module object", "import pyodide_js, js\nM = pyodide_js._module.memory" + grow + allocate},
		{"a hook on Memory.prototype.grow", `import js
from pyodide.ffi import to_js
js.eval("const g = WebAssembly.Memory.prototype.grow; WebAssembly.Memory.prototype.grow = function (n) { globalThis.seen = this; return g.call(this, n) }")
b = bytearray(128 << 20)
del b
size = js.eval("""(bytes) => { const m = globalThis.seen;
  new WebAssembly.Instance(new WebAssembly.Module(bytes), {env: {memory: m}}).exports.grow((1 << 30) / 65536 - m.buffer.byteLength / 65536);
  return m.buffer.byteLength }""")(to_js(bytes.fromhex("` + growImported(false) + `")))` + allocate},
		{"a shared library loaded with ctypes", `import ctypes, pyodide_js
open('/tmp/grow.so', 'wb').write(bytes.fromhex("` + growImported(true) + `"))
M = pyodide_js._module.memory
ctypes.CDLL('/tmp/grow.so').grow((1 << 30) // 65536 - M.buffer.byteLength // 65536)
size = M.buffer.byteLength
del M` + allocate},
		{"a 1.5 GiB bytearray", `size = 0
try:
    b = bytearray(1536 * 2**20)
    got = 'allocated 1.5 GiB'
except MemoryError:
    got = 'MemoryError'
(got, size)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "cap:" + c.name
			mustSucceed(t, e, key, "keep = 'still here'")
			// A generous limit: the cgroup v2 VM faults pages in slowly, and the case is
			// about the outcome (success or MemoryError), not the time.
			r, err := e.Execute(context.Background(), key, Request{Code: c.code, Timeout: 120 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s %+v", r.Status, resultOf(r), r.Error)
			switch {
			case r.Status == StatusSuccess && strings.HasPrefix(resultOf(r), "('MemoryError', "):
				var mib int
				if _, err := fmt.Sscanf(resultOf(r), "('MemoryError', %d)", &mib); err != nil || mib<<20 > cap {
					t.Fatalf("the interpreter's memory grew to %d MiB, past its %d MiB cap", mib, cap>>20)
				}
			case r.Error != nil && strings.Contains(r.Error.Message, "memory limit"):
				// Killed, and said so: the session comes back from its saved state.
			default:
				t.Fatalf("past the cap: %s %s %+v", r.Status, resultOf(r), r.Error)
			}
			if got := resultOf(mustSucceed(t, e, key, "keep")); got != "'still here'" {
				t.Fatalf("then: %s", got)
			}
		})
	}
}

// TestMemoryLimitOutlivesImports: user code can import() the Worker's modules (a module
// already loaded needs no read permission) and call what they export; none of it lifts
// the Worker's limit on Memory.grow, whose controls were taken before any user code ran.
func TestMemoryLimitOutlivesImports(t *testing.T) {
	e, _, key := setup(t)
	k := key("imports")
	mustSucceed(t, e, k, "keep = 'still here'")
	code := fmt.Sprintf(`import js
attack = js.eval("""async (dir, pages) => {
  const tried = [];
  for (const f of ["memory.ts", "restore.ts", "wasm.ts"]) {
    const m = await import("file://" + dir + "/worker/" + f);
    for (const [name, fn] of Object.entries(m)) {
      if (typeof fn !== "function") continue;
      try {
        const r = fn(2 ** 40, 2 ** 40);
        for (const g of Object.values(r ?? {})) if (typeof g === "function") g(2 ** 40);
        tried.push(name);
      } catch (e) {
        tried.push(name + " (" + e.message + ")");
      }
    }
  }
  try {
    new WebAssembly.Memory({ initial: 1 }).grow(pages);
    return "grew past the limit after " + tried.join(", ");
  } catch (e) {
    return e.message;
  }
}""")
await attack(%q, %d)`, e.cfg.RuntimeDir, e.cfg.MemoryBytes/65536+16)
	if got := resultOf(mustSucceed(t, e, k, code)); got != "'sandbox memory limit reached'" {
		t.Fatalf("after importing the Worker's modules: %s", got)
	}
	if got := resultOf(mustSucceed(t, e, k, "keep")); got != "'still here'" {
		t.Fatalf("then: %s", got)
	}
}
