package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// The isolation boundary is one process per session, confined by the kernel. These tests
// attack it from inside Python the ways that broke the shared-process design, and check
// each time that what the attacker can reach is only its own process.

// TestSessionProcessIsConfined: a live session's process is in namespaces of its own, in
// a cgroup with a hard memory cap, and runs as an unprivileged user.
func TestSessionProcessIsConfined(t *testing.T) {
	e, _, key := setup(t)
	k := key("confined")
	mustSucceed(t, e, k, "x = 1")
	pi, err := e.Inspect(k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", pi)
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts"} {
		if !strings.Contains(strings.Join(pi.Namespaces, ","), ns) {
			t.Errorf("the session shares the server's %s namespace (own: %v)", ns, pi.Namespaces)
		}
	}
	if pi.UID == "" || pi.UID == "0" {
		t.Errorf("the session runs as uid %q", pi.UID)
	}
	if pi.Cgroup == "" || pi.MemoryMax != e.cfg.MemoryBytes+e.cfg.RuntimeOverheadBytes || pi.TasksMax != proc.SessionTasks {
		t.Errorf("cgroup %q memory max %d tasks max %d", pi.Cgroup, pi.MemoryMax, pi.TasksMax)
	}
	// The kernel's own limit, as the configuration says: memory.max on cgroup v2,
	// memory.limit_in_bytes on v1.
	limitFile := "memory.limit_in_bytes"
	if _, err := os.Stat(filepath.Join(pi.Cgroup, "memory.max")); err == nil {
		limitFile = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(pi.Cgroup, limitFile))
	if err != nil {
		t.Fatalf("the session's kernel memory limit cannot be read: %v", err)
	}
	if want := e.cfg.MemoryBytes + e.cfg.RuntimeOverheadBytes; strings.TrimSpace(string(b)) != strconv.FormatInt(want, 10) {
		t.Errorf("kernel memory limit (%s) %s, want %d", limitFile, b, want)
	}
}

// growWasm is a WebAssembly module with its own memory and a function that runs the
// memory.grow instruction: no JavaScript hook sees that growth.
const growWasm = `new Uint8Array([0,97,115,109,1,0,0,0, 1,6,1,96,1,127,1,127, 3,2,1,0, 5,3,1,0,1,
  7,9,2,1,109,2,0,1,103,0,0, 10,8,1,6,0,32,0,64,0,11])`

// TestNeighbourRunInFlight: while a neighbour's run is in flight, an attacker forges
// protocol frames, reads every descriptor it can name, hooks its Worker's messages and
// exhausts memory. The neighbour's run completes with its own result, and nothing of it
// (code or values) reaches the attacker.
func TestNeighbourRunInFlight(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.MemoryBytes = 256 << 20 })
	const secret = "n-42-secret"
	forgedFrame := `(() => { const j = new TextEncoder().encode(JSON.stringify({id: 1, ok: true, status: "success", result: "'FORGED'", stdout: "FORGED", stderr: "", changed: [], omitted: 0, deleted: [], packages: []}));
  const b = new Uint8Array(8 + j.length); const d = new DataView(b.buffer); d.setUint32(0, 4 + j.length); d.setUint32(4, j.length); b.set(j, 8); return b; })()`
	tests := []struct {
		name, code string
		killed     bool // the attack costs the attacker its own process
	}{
		{"forge frames on every descriptor", fmt.Sprintf(`import js
js.eval('''globalThis.frame = %s''')
js.eval('''(async () => { const fs = await import("node:fs");
  for (let fd = 0; fd < 64; fd++) { try { fs.writeSync(fd, frame) } catch {} }
  try { Deno.stdout.writeSync(frame) } catch {}
  try { Deno[Deno.internal].core.writeSync(1, frame) } catch {} })()''')
print("forged")`, forgedFrame), false},
		{"read stdin and every descriptor", `import js
out = await js.eval('''(async () => { const fs = await import("node:fs"); let got = "";
  for (let fd = 0; fd < 64; fd++) { try { const b = new Uint8Array(65536); const n = fs.readSync(fd, b); got += new TextDecoder().decode(b.subarray(0, n)) } catch {} }
  try { const b = new Uint8Array(65536); const n = Deno.stdin.readSync(b); if (n) got += new TextDecoder().decode(b.subarray(0, n)) } catch {}
  return got })()''')
print("read", len(out), out[:2000])`, false},
		{"hook onmessage and forge replies", `import js
js.eval('''self.onmessage = (e) => postMessage({op: "done", status: "success", result: "'FORGED'", stdout: "FORGED", stderr: "", changed: [], omitted: 0, deleted: [], packages: []});
postMessage({op: "done", status: "success", result: "'FORGED'", stdout: "FORGED", stderr: "", changed: [], omitted: 0, deleted: [], packages: []})''')
print("hooked")`, false},
		{"JS memory bomb", `import js
js.eval('globalThis.hog = []; for (;;) hog.push(new Uint8Array(32 << 20).fill(1))')`, true},
		{"wasm memory.grow past the cap", `import js
js.eval('''const inst = new WebAssembly.Instance(new WebAssembly.Module(` + growWasm + `));
for (let i = 0; i < 8; i++) { if (inst.exports.g(4096) < 0) break; new Uint8Array(inst.exports.m.buffer).fill(7); }''')
print("grew past the cap")`, true},
	}
	// One neighbour lives through every attack: each must leave it untouched.
	const neighbour = "neighbour"
	mustSucceed(t, e, neighbour, "y = 1")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			attacker := "attacker " + tt.name
			mustSucceed(t, e, attacker, "x = 1")
			type out struct {
				r   Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				r, err := e.Execute(ctx, neighbour, Request{Code: fmt.Sprintf("import time\nsecret = %q\ntime.sleep(2)\nsecret", secret)})
				done <- out{r, err}
			}()
			time.Sleep(300 * time.Millisecond)
			var streamed strings.Builder
			// A generous limit: the memory attacks end by the kernel's cap, which a slow
			// machine (a cgroup v2 VM that faults pages in slowly) reaches late.
			r, err := e.Execute(ctx, attacker, Request{Code: tt.code, Timeout: 120 * time.Second,
				OnOutput: func(_, c string) { streamed.WriteString(c) }})
			if err != nil {
				t.Fatalf("attacker: %v", err)
			}
			t.Logf("attacker: %s %q %+v", r.Status, r.Stdout[:min(len(r.Stdout), 300)], r.Error)
			if tt.killed {
				if r.Status == StatusSuccess || r.Error == nil || !strings.Contains(r.Error.Message, "memory limit") {
					t.Errorf("the attacker's process was not stopped by its memory limit: %s %+v", r.Status, r.Error)
				}
			}
			all := r.Stdout + r.Stderr + streamed.String()
			if r.Result != nil {
				all += *r.Result
			}
			if strings.Contains(all, secret) || strings.Contains(all, "time.sleep(2)") {
				t.Errorf("the attacker saw the neighbour's run: %q", all)
			}
			n := <-done
			if n.err != nil || n.r.Status != StatusSuccess || resultOf(n.r) != fmt.Sprintf("'%s'", secret) {
				t.Fatalf("neighbour: %v %s %q %+v", n.err, n.r.Status, resultOf(n.r), n.r.Error)
			}
			if strings.Contains(n.r.Stdout, "FORGED") {
				t.Errorf("a forged frame reached the neighbour")
			}
			// Whatever the attacker did to its own process, a reset gives it a clean one.
			if err := e.Reset(ctx, attacker); err != nil {
				t.Fatal(err)
			}
			if got := resultOf(mustSucceed(t, e, attacker, "2 + 2")); got != "4" {
				t.Errorf("attacker's session afterwards: %s", got)
			}
		})
	}
}

// TestInputIsEOF: there is no interactive stdin, and input() says so instead of hanging.
func TestInputIsEOF(t *testing.T) {
	e, _, key := setup(t)
	k := key("input")
	r := run(t, e, k, "input('name? ')")
	if r.Status != StatusError || r.Error.Type != "EOFError" || !strings.Contains(r.Error.Message, "no interactive stdin") {
		t.Fatalf("input(): %s %+v", r.Status, r.Error)
	}
	if got := resultOf(mustSucceed(t, e, k, "import sys\nsys.stdin.read()")); got != "''" {
		t.Fatalf("sys.stdin.read() = %s", got)
	}
}

// TestBaseSnapshotIsPrivate: a session that overwrites every snapshot buffer it can reach
// changes nothing for the sessions that start after it.
func TestBaseSnapshotIsPrivate(t *testing.T) {
	e, _, key := setup(t)
	mustSucceed(t, e, key("planter"), `import pyodide_js, js
planted = 'PLANTED'
snap = getattr(pyodide_js._api.config, "_loadSnapshot", None)
if snap is not None:
    js.eval('(s) => new Uint8Array(s.buffer || s).fill(65)')(snap)
js.eval('for (const k of Object.getOwnPropertyNames(globalThis)) { try { const v = globalThis[k]; if (v instanceof SharedArrayBuffer) new Uint8Array(v).fill(65) } catch {} }')`)
	for i := range 3 {
		k := key(fmt.Sprintf("after-%d", i))
		if got := resultOf(mustSucceed(t, e, k, "'planted' in globals(), 1 + 1")); got != "(False, 2)" {
			t.Fatalf("session %d after the planter: %s", i, got)
		}
	}
}

// TestNothingRunsBetweenRuns: timers a run leaves behind get no CPU once it has
// returned: the session's process is frozen until its next run. (Nested Workers, which
// once ran on too, are refused: TestNestedWorkersRefused.)
func TestNothingRunsBetweenRuns(t *testing.T) {
	e, _, key := setup(t)
	k := key("timers")
	mustSucceed(t, e, k, `import js
js.eval("globalThis.ticks = 0; setInterval(() => { ticks++; const t = Date.now(); while (Date.now() - t < 20) {} }, 1)")
import asyncio
await asyncio.sleep(0.3)`)
	pids := sessionPIDs(t, e, k)
	before := cpuTicks(pids)
	time.Sleep(1500 * time.Millisecond)
	used := cpuTicks(pids) - before
	t.Logf("CPU between runs: %d ticks (1/100 s) over 1.5 s", used)
	if used > 10 {
		t.Fatalf("the session used %d ticks of CPU between runs", used)
	}
	// Its next run thaws it, and the interval ticks again while it runs.
	if got := resultOf(mustSucceed(t, e, k, "import js, asyncio\na = js.ticks\nawait asyncio.sleep(0.2)\njs.ticks > a")); got != "True" {
		t.Fatalf("the session's timers did not resume during its run: %s", got)
	}
}

// TestGraceKillLeavesNothing: code that ignores the interrupt is killed with its whole
// process: no task of it runs afterwards.
func TestGraceKillLeavesNothing(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.Grace = 500 * time.Millisecond })
	k := "stubborn"
	mustSucceed(t, e, k, "x = 1")
	pids := sessionPIDs(t, e, k)
	r, err := e.Execute(context.Background(), k, Request{Timeout: time.Second, Code: sandboxtest.Stubborn})
	if err != nil || r.Status != StatusTimeout || !strings.Contains(r.Error.Message, "terminated") {
		t.Fatalf("%v %s %+v", err, r.Status, r.Error)
	}
	for _, pid := range pids {
		// A zombie waiting for the host's init to reap it runs nothing.
		if _, ok := testenv.Poll(5*time.Second, func() bool { st := procState(pid); return st == "" || st == "Z" }); !ok {
			t.Errorf("process %d of the killed session is still there (state %s)", pid, procState(pid))
		}
	}
	if got := resultOf(mustSucceed(t, e, k, "x")); got != "1" {
		t.Fatalf("restored session: %s", got)
	}
}

// TestRestoreDeadline: bringing a session back is bounded: a replay that never ends gets
// its process killed, and since trying again would replay the same cells into the same
// limit, the session is reset and the run goes on in a new one, told so once.
func TestRestoreDeadline(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay, c.RestoreTimeout = true, 3*time.Second })
	k := "wedged"
	// The cell loops on an upload that was not there when it ran first, and is when it
	// replays (a replay mounts /data before its cells).
	mustSucceed(t, e, k, "import os\nwhile os.path.exists('/data/flag'):\n    pass\nx = 1")
	mustSucceed(t, e, k, "y = 1")
	evictLive(t, e, k)
	// The replay never ends by itself: only the restore deadline can end it (the
	// context's own, far later, would end this call with its error instead).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := e.Execute(ctx, k, Request{Code: "x = 2\nx", Data: files(File{Name: "flag", Data: []byte("1")})})
	if err != nil || resultOf(r) != "2" || r.Session.ResetFrom != 2 || strings.Count(r.Stderr, "the session was reset") != 1 ||
		!strings.Contains(r.Stderr, "restore limit") {
		t.Fatalf("restore of a wedged replay: err %v, %s reset from %d, stderr %q", err, resultOf(r), r.Session.ResetFrom, r.Stderr)
	}
	if r := mustSucceed(t, e, k, "x"); resultOf(r) != "2" || r.Session.ResetFrom != 0 || strings.Contains(r.Stderr, "reset") {
		t.Fatalf("the run after: %s, reset from %d, stderr %q", resultOf(r), r.Session.ResetFrom, r.Stderr)
	}
	if got := resultOf(mustSucceed(t, e, "other", "1 + 1")); got != "2" {
		t.Fatalf("another session afterwards: %s", got)
	}
}

// TestStorageCaps: a session's durable state is bounded; past the cap the heap is not
// saved (the session stays durable by its log of cells), then the save is refused with
// the sizes, and the run still reports what ran.
func TestStorageCaps(t *testing.T) {
	t.Parallel()
	e, b := newEngine(t, func(c *Config) { c.MaxStateBytes = 2 << 20 })
	k := "big"
	mustSucceed(t, e, k, "import os\ndata = bytearray(os.urandom(3_000_000))\nlen(data)")
	if info := checkpointNow(t, e, k); info.StateBytes > 64<<10 {
		t.Fatalf("a 3 MB heap under a 2 MiB cap was saved: %d bytes, mode %s", info.StateBytes, info.Mode)
	}
	r := mustSucceed(t, e, k, "open('big.bin', 'wb').write(b'x' * 3_000_000)")
	if !r.Session.NotSaved || !strings.Contains(r.Stderr, "2.0 MiB limit") {
		t.Fatalf("3 MB of files under a 2 MiB cap: %q", r.Stderr)
	}
	n, err := b.rdb.HStrLen(context.Background(), skey(e, k, "files"), "big.bin").Result()
	if err != nil || n != 0 {
		t.Fatalf("the refused file is in Redis: %d %v", n, err)
	}
	// The warm session still has it.
	if got := resultOf(mustSucceed(t, e, k, "len(open('big.bin', 'rb').read())")); got != "3000000" {
		t.Fatalf("warm file: %s", got)
	}
}

// TestHiddenGlobals: browser and Deno APIs that would reach shared or host state are not
// there for user code.
func TestHiddenGlobals(t *testing.T) {
	e, _, key := setup(t)
	got := resultOf(mustSucceed(t, e, key("globals"), `import js
[str(js.eval("typeof " + n)) for n in ["caches", "navigator.gpu", "Worker", "BroadcastChannel", "process"]]`))
	if got != "['undefined', 'undefined', 'undefined', 'undefined', 'undefined']" {
		t.Fatalf("globals: %s", got)
	}
}

// TestNestedWorkersRefused: no way user code has to start a Worker or a thread from the
// session's Worker starts one (a nested Worker would run code without the session's
// hardening: Deno.exit, the memory limit on grow, a silenced console), and the refusal
// says why. Sixteen tries leave the process with the threads it had.
func TestNestedWorkersRefused(t *testing.T) {
	e, _, key := setup(t)
	k := key("nested")
	mustSucceed(t, e, k, "x = 1")
	threads := func() (n int) {
		for _, pid := range sessionPIDs(t, e, k) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "Threads:"); ok {
					c, _ := strconv.Atoi(strings.TrimSpace(v))
					n += c
				}
			}
		}
		return n
	}
	before := threads()
	const src = "setInterval(() => {}, 60000); postMessage(typeof Deno.exit)"
	ways := map[string]string{
		"worker_threads, eval":           "import('node:worker_threads').then(w => new w.Worker(src, {eval: true}))",
		"worker_threads, default export": "import('node:worker_threads').then(w => new w.default.Worker(src, {eval: true}))",
		"worker_threads, data: URL":      "import('node:worker_threads').then(w => new w.Worker(new URL('data:text/javascript,' + encodeURIComponent(src))))",
		"worker_threads, blob: URL":      "import('node:worker_threads').then(w => new w.Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'}))))",
		"worker_threads, subclass":       "import('node:worker_threads').then(w => { class W extends w.Worker {}; return new W(src, {eval: true}) })",
		"worker_threads, Reflect":        "import('node:worker_threads').then(w => Reflect.construct(w.Worker, [src, {eval: true}], function () {}))",
		"worker_threads, base set back":  "Promise.all([import('node:worker_threads'), import('node:events')]).then(([w, ev]) => { try { Object.setPrototypeOf(w.Worker, ev.EventEmitter) } catch {} return new w.Worker(src, {eval: true}) })",
		"require":                        "import('node:module').then(m => new (m.createRequire('/tmp/x.js')('worker_threads').Worker)(src, {eval: true}))",
		"process.getBuiltinModule":       "import('node:process').then(p => new (p.default.getBuiltinModule('node:worker_threads').Worker)(src, {eval: true}))",
		"a data: module":                 "import('data:text/javascript,' + encodeURIComponent(\"import { Worker } from 'node:worker_threads'; new Worker('1', { eval: true })\"))",
		"web Worker, data: URL":          "new Worker('data:text/javascript,' + encodeURIComponent(src), {type: 'module'})",
		"web Worker, blob: URL":          "new Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'})), {type: 'module'})",
		"web Worker, from self":          "new self.Worker('data:text/javascript,1', {type: 'module'})",
		"the op":                         "Deno[Deno.internal].core.ops.op_create_worker({hasSourceCode: true, sourceCode: src, specifier: 'data:text/javascript,', name: '', permissions: null, workerType: 'node', closeOnIdle: true})",
		"worker_threads, 16 in a row":    "import('node:worker_threads').then(w => { const r = []; for (let i = 0; i < 16; i++) { try { r.push(new w.Worker(src, {eval: true})) } catch (e) { if (i === 15) throw e } } return r })",
		"a nested realm (node:vm)":       "import('node:vm').then(vm => { const W = vm.runInNewContext('typeof Worker === \"function\" ? Worker : null'); if (!W) throw new Error('no Worker in the new realm'); return new W('data:text/javascript,1', {type: 'module'}) })",
	}
	spec, err := json.Marshal(ways)
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`import js, json
out = {}
for name, way in json.loads(%q).items():
    try:
        await js.eval("(src) => Promise.resolve().then(() => " + way + ")")(%q)
        out[name] = "started"
    except Exception as e:
        out[name] = str(e)
print(json.dumps(out))`, spec, src)
	r := mustSucceed(t, e, k, code)
	var out map[string]string
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("%q: %v", r.Stdout, err)
	}
	for name := range ways {
		got := out[name]
		t.Logf("%s: %s", name, got)
		switch {
		case got == "started" || got == "":
			t.Errorf("%s: a Worker started (%q)", name, got)
		case strings.HasPrefix(name, "web Worker") || name == "the op" || strings.HasPrefix(name, "a nested realm"):
			// Not there at all: no such global, no such op, no Worker in a new realm.
		case !strings.Contains(got, "cannot be started in the sandbox"):
			t.Errorf("%s: refused without saying why: %q", name, got)
		}
	}
	if after := threads(); after > before+4 {
		t.Errorf("the session process went from %d to %d threads", before, after)
	}
	if got := resultOf(mustSucceed(t, e, k, "x")); got != "1" {
		t.Fatalf("the session afterwards: %s", got)
	}
}

func sessionPIDs(t *testing.T, e *Engine, key string) []int {
	t.Helper()
	lv := e.sess.get(key)
	if lv == nil || lv.Process().CgroupDir() == "" {
		t.Fatalf("session %s is not live in a cgroup", key)
	}
	pids := lv.Process().Tasks()
	if len(pids) == 0 {
		t.Fatalf("no tasks in %s", lv.Process().CgroupDir())
	}
	return pids
}

// procState is a process's state letter, "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[0]
}

// cpuTicks adds up the user and system CPU time of processes, in clock ticks.
func cpuTicks(pids []int) int64 {
	st := taskStats(pids)
	return st.user + st.sys
}

// taskStat is what /proc/PID/stat counts for a set of processes: minor page faults and
// CPU clock ticks in user and kernel mode.
type taskStat struct{ faults, user, sys int64 }

func taskStats(pids []int) taskStat {
	var t taskStat
	for _, pid := range pids {
		if _, f := procStat(fmt.Sprintf("/proc/%d/stat", pid)); len(f) > 12 {
			n, _ := strconv.ParseInt(f[7], 10, 64)
			u, _ := strconv.ParseInt(f[11], 10, 64)
			k, _ := strconv.ParseInt(f[12], 10, 64)
			t.faults, t.user, t.sys = t.faults+n, t.user+u, t.sys+k
		}
	}
	return t
}

// procStat reads a /proc stat file: the task's name, and the fields after it (state first).
func procStat(path string) (name string, fields []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", nil
	}
	return s[open+1 : end], strings.Fields(s[end+2:])
}

// TestCodeCacheIsReadOnly: every session process shares the node's compiled-code cache
// (Deno's DENO_DIR), mounted read-only, so no session can plant code another runs; a
// session that tries to write there changes nothing.
func TestCodeCacheIsReadOnly(t *testing.T) {
	e, _, key := setup(t)
	if !e.procs.code.Ready() {
		t.Fatal("the compiled-code cache was not filled before the engine came up")
	}
	k := key("code-cache")
	r := mustSucceed(t, e, k, `import js
tries = []
for f in ["/tmp/deno/planted", "/tmp/deno/v8_code_cache_v2"]:
    try:
        js.Deno.writeTextFileSync(f, "planted")
        tries.append("wrote " + f)
    except Exception as err:
        tries.append(type(err).__name__)
tries`)
	t.Logf("writes: %s", resultOf(r))
	if strings.Contains(resultOf(r), "wrote") {
		t.Fatalf("a session wrote to the code cache: %s", resultOf(r))
	}
	if !mountedReadOnly(t, sessionPIDs(t, e, k), proc.DenoDir) {
		t.Fatalf("no session task mounts the code cache at %s", proc.DenoDir)
	}
	names, err := os.ReadDir(e.procs.code.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n.Name() == "planted" {
			t.Fatal("a session planted a file in the code cache")
		}
	}
}

// TestBaseFileIsReadOnly: every session process reads the node's packed base from one
// file, mounted read-only; a session that tries to change, truncate or remove it changes
// nothing for the sessions that start after it.
func TestBaseFileIsReadOnly(t *testing.T) {
	e, _, key := setup(t)
	name, err := e.procs.bases.name(e.procs.currentBase())
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(e.procs.bases.dir, name)
	before, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	k := key("base-file")
	r := mustSucceed(t, e, k, fmt.Sprintf(`import js
f = %q
tries = []
for what, attempt in [
    ("write", lambda: js.Deno.writeTextFileSync(f, "planted")),
    ("truncate", lambda: js.Deno.truncateSync(f, 0)),
    ("remove", lambda: js.Deno.removeSync(f)),
    ("plant", lambda: js.Deno.writeTextFileSync(%q, "planted")),
]:
    try:
        attempt()
        tries.append(what + " done")
    except Exception as err:
        tries.append(type(err).__name__)
tries`, proc.BaseMount+"/"+name, proc.BaseMount+"/planted"))
	t.Logf("tries: %s", resultOf(r))
	if strings.Contains(resultOf(r), "done") {
		t.Fatalf("a session changed the base's directory: %s", resultOf(r))
	}
	if !mountedReadOnly(t, sessionPIDs(t, e, k), proc.BaseMount) {
		t.Fatalf("no session task mounts the bases at %s", proc.BaseMount)
	}
	if after, err := os.ReadFile(host); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the base file changed: %v", err)
	}
	if got := resultOf(mustSucceed(t, e, key("after"), "1 + 1")); got != "2" {
		t.Fatalf("a session after the attempt: %s", got)
	}
}

// mountedReadOnly tells whether any of the tasks mounts path, and fails the test for
// each that mounts it writable.
func mountedReadOnly(t *testing.T, pids []int, path string) bool {
	t.Helper()
	mounted := false
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 5 && f[4] == path {
				mounted = true
				if !strings.Contains(","+f[5]+",", ",ro,") {
					t.Errorf("pid %d mounts %s %s", pid, path, f[5])
				}
			}
		}
	}
	return mounted
}
