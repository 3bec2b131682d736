// The control thread of one session process. The Go engine starts one such process per
// live session (and per warm-pool spare), confined by bubblewrap and a cgroup; it holds
// the protocol (protocol.ts) on fds 3 and 4, and runs Pyodide in one Worker so that an
// interrupt can reach Python through a SharedArrayBuffer while it runs.
//
// Python reaches JavaScript in the Worker's realm, so everything the Worker posts is
// treated as the user's: checked for shape and size here, and again by the engine. A
// session can only ever forge its own results: no other session lives in this process.

// deno-lint-ignore-file no-explicit-any

import { describe, FrameWriter, readFrames, type RuntimeConfig } from "./protocol.ts";

const input = await Deno.open("/dev/fd/3", { read: true });
const output = new FrameWriter(await Deno.open("/dev/fd/4", { write: true }));
const reply = (id: number, r: Record<string, unknown>) => output.send({ id, ...r });

let config: RuntimeConfig | null = null;
let worker: Worker | null = null;
let wasm: WebAssembly.Module | undefined;
let wasmSize = 0;
const interrupt = new SharedArrayBuffer(2);
let outBytes = 0;
let displayBytes = 0, displayCount = 0, displayDropped = 0;
let pipInFlight = false;
let runStarted = false; // the run in flight said its code started (once per run)
// The run in flight, named by a number the Worker echoes in what it sends for that run.
// A "done" of an earlier run means that run's code kept going after its answer (it had
// posted a forged one): the process is ended, since its state is no longer the saved one.
let runNonce = "";
// How long a Worker has to show it is idle after its "done" (a busy machine included).
const IDLE_WITHIN_MS = 2000;
// The replay of an attach: each cell gets its time limit, then an interrupt, then the
// grace; a cell that outlives both ends the process, and the engine is told which.
const replay = { id: 0, limits: [] as number[], grace: 0, cell: -1, stopped: -1, timers: [] as number[] };

type Pending = { expect: string; resolve: (v: any) => void; reject: (e: Error) => void };
let pending: Pending | null = null;

function die(why: string): never {
  // A broken Worker leaves this process useless: the engine sees the pipe close, and
  // restores the session elsewhere.
  try {
    Deno.stderr.writeSync(new TextEncoder().encode(`session process: ${why}\n`));
  } catch { /* ignore */ }
  Deno.exit(70);
}

function newWorker(cfg: RuntimeConfig): Worker {
  return new Worker(new URL("./worker.ts", import.meta.url), {
    type: "module",
    deno: {
      permissions: {
        read: cfg.read, net: cfg.net.length ? cfg.net : false,
        env: false, run: false, write: false, ffi: false, sys: false, import: false,
      },
    },
  } as any);
}

// warmUp restores the base interpreter once in a throwaway Worker: V8 compiles Pyodide's
// wasm lazily, and the compiled code belongs to the module, which the session's Worker
// shares. A spare pays this while it waits, not the restore that takes it (~0.3 s).
function warmUp(cfg: RuntimeConfig, basePath: string): Promise<void> {
  const w = newWorker(cfg);
  return new Promise<void>((resolve, reject) => {
    w.onmessage = ({ data: m }) => {
      if (m?.op === "primed") {
        w.postMessage({
          op: "init", wasm, wasmSize, pyodideURL: cfg.pyodideURL, pyodideDir: cfg.pyodideDir,
          lockFileURL: cfg.lockFileURL, packageBaseURL: cfg.packageBaseURL, memory: cfg.memory,
          interrupt: new SharedArrayBuffer(2), warm: true, warmup: true,
        });
      } else if (m?.op === "ready") resolve();
      else reject(new Error("warm-up failed"));
    };
    w.onerror = (e) => {
      e.preventDefault();
      reject(new Error(`warm-up: ${e.message}`));
    };
    w.postMessage({ op: "prime", pyodideURL: cfg.pyodideURL, basePath, warmup: true });
  }).finally(() => w.terminate());
}

// compileWasm compiles Pyodide's wasm once for every Worker of this process, its memory
// capped at the session's (capMemory). V8 keeps a copy of the bytes with the module: the
// ones read here are freed at once (detached), not left for a collection this mostly idle
// isolate would seldom make.
async function compileWasm(path: string, memory: number): Promise<WebAssembly.Module> {
  const bytes = await Deno.readFile(path);
  wasmSize = bytes.byteLength;
  const capped = capMemory(bytes, Math.floor(memory / 65536));
  const mod = await WebAssembly.compile(capped);
  bytes.buffer.transfer(0);
  capped.buffer.transfer(0);
  return mod;
}

// capMemory returns the module with its memory's declared maximum lowered to pages. The
// interpreter's memory is the module's own, and Python can reach it (it is on Pyodide's
// module object, and in whatever grows it): past a maximum V8 itself refuses to grow it,
// by Memory.grow or by the memory.grow of any module it is handed to, so malloc fails
// and Python raises MemoryError at the cap, however the memory was reached.
function capMemory(wasm: Uint8Array, pages: number): Uint8Array {
  const leb = (at: number): [number, number] => {
    let v = 0, shift = 0, b: number;
    do {
      b = wasm[at++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return [v, at];
  };
  const out = (v: number): number[] => {
    const r: number[] = [];
    do {
      let b = v % 128;
      v = Math.floor(v / 128);
      if (v) b |= 0x80;
      r.push(b);
    } while (v);
    return r;
  };
  for (let at = 8; at < wasm.length;) {
    const id = wasm[at];
    const [size, body] = leb(at + 1);
    if (id === 5) {
      let [count, p] = leb(body);
      const content = [...out(count)];
      for (; count > 0; count--) {
        const flags = wasm[p++];
        if (flags & ~1) throw new Error(`Pyodide's wasm memory has limits ${flags} this runtime cannot cap`);
        let min: number, max = Infinity;
        [min, p] = leb(p);
        if (flags & 1) [max, p] = leb(p);
        content.push(1, ...out(min), ...out(Math.max(min, Math.min(max, pages))));
      }
      const section = [5, ...out(content.length), ...content];
      const r = new Uint8Array(at + section.length + wasm.length - (body + size));
      r.set(wasm.subarray(0, at));
      r.set(section, at);
      r.set(wasm.subarray(body + size), at + section.length);
      return r;
    }
    at = body + size;
  }
  throw new Error("Pyodide's wasm defines no memory of its own: its size cannot be capped");
}

function startWorker(cfg: RuntimeConfig) {
  worker = newWorker(cfg);
  worker.onmessage = (e) => onWorker(e.data);
  worker.onerror = (e) => {
    e.preventDefault();
    die(`worker error: ${e.message}`);
  };
  worker.onmessageerror = (e) => {
    e.preventDefault();
    die("worker sent a message that cannot be read");
  };
}

function onWorker(m: any) {
  if (typeof m !== "object" || m === null) return;
  const p = pending;
  if (m.op === "pip") {
    // micropip.install: the engine resolves, fetches and verifies; the session only
    // ever gets paths into the read-only package cache. One request at a time.
    if (!Number.isSafeInteger(m.seq) || typeof m.req !== "string") return;
    let req: any = null;
    try {
      if (m.req.length <= 65536) req = JSON.parse(m.req);
    } catch { /* answered below */ }
    const refuse = (error: string) => worker?.postMessage({ op: "pipDone", seq: m.seq, error });
    if (p?.expect !== "done") return refuse("micropip.install is only available while code runs");
    if (pipInFlight) return refuse("another micropip.install is in progress in this session");
    if (!req || typeof req !== "object" || !Array.isArray(req.requirements)) return refuse("unreadable install request");
    pipInFlight = true;
    output.send({
      id: 0, op: "pip", seq: m.seq,
      req: { requirements: req.requirements.map(String).slice(0, 100), deps: req.deps !== false, keepGoing: !!req.keepGoing, lock: !!req.lock },
    });
    return;
  }
  if (!p) return;
  if (m.op === "replaying") {
    // Cells replay in order, each once: the word for the next one, never a repeat that
    // would re-arm a cell's time limit (Python can post this message too).
    if (p.expect !== "attached" || m.index !== replay.cell + 1 || m.index >= replay.limits.length) return;
    replay.timers.forEach(clearTimeout);
    const i = m.index, limit = replay.limits[i];
    replay.cell = i;
    replay.timers = [
      setTimeout(() => {
        replay.stopped = i;
        const a = new Uint8Array(interrupt);
        a[1] = 1;
        a[0] = 2; // SIGINT
      }, limit),
      setTimeout(async () => {
        await reply(replay.id, { ok: false, kind: "replay", error: `replay of cell ${i + 1} did not stop within its time limit (${limit / 1000} s) and the ${replay.grace / 1000} s grace after it` });
        die(`replay of cell ${i + 1} did not stop`);
      }, limit + replay.grace),
    ];
    return;
  }
  if (m.op === "started") {
    // The run's code starts: the engine starts its time limit.
    if (p.expect === "done" && !runStarted) {
      runStarted = true;
      output.send({ id: 0, op: "started" });
    }
    return;
  }
  if (m.op === "out") {
    if (p.expect !== "done" || typeof m.chunk !== "string" || (m.stream !== "stdout" && m.stream !== "stderr")) return;
    outBytes += m.chunk.length;
    if (outBytes > 4 * config!.maxOutput + 65536) return;
    output.send({ id: 0, op: "out", stream: m.stream, chunk: m.chunk, truncated: m.truncated === true });
    return;
  }
  if (m.op === "display") {
    // Bounded here as well as in the Worker (whose word is the user's): the engine
    // validates each item and keeps its own count.
    if (p.expect !== "done" || typeof m.item !== "string" || (m.kind !== "display" && m.kind !== "result")) return;
    displayBytes += m.item.length;
    displayCount++;
    if (displayCount > config!.maxDisplays || displayBytes > config!.maxDisplayBytes) {
      displayDropped++;
      return;
    }
    output.send({ id: 0, op: "display", kind: m.kind, item: m.item });
    return;
  }
  if (m.op === "failed") {
    pending = null;
    p.reject(new Error(typeof m.error === "string" ? m.error.slice(0, 4000) : "worker failed"));
    return;
  }
  if (m.op !== p.expect) return;
  pending = null;
  p.resolve(m);
}

function call(msg: any, expect: string, transfer: Transferable[] = []): Promise<any> {
  if (!worker) return Promise.reject(new Error("not primed"));
  if (pending) return Promise.reject(new Error("busy"));
  return new Promise((resolve, reject) => {
    pending = { expect, resolve, reject };
    worker!.postMessage(msg, transfer);
  });
}

function str(v: unknown, max: number): string {
  return typeof v === "string" ? v.slice(0, max) : "";
}

// strings keeps the strings of a list, each cut to max.
function strings(vs: unknown[], max: number): string[] {
  return vs.filter((v): v is string => typeof v === "string").map((v) => v.slice(0, max));
}

// checkRun bounds what a run's reply may carry before it goes to the engine.
function checkRun(r: any): string | null {
  const cfg = config!;
  if (typeof r.status !== "string" || !["success", "error", "timeout"].includes(r.status)) return "bad status";
  if (typeof r.stdout !== "string" || typeof r.stderr !== "string") return "bad output";
  if (r.stdout.length > 2 * cfg.maxOutput + 1024 || r.stderr.length > 2 * cfg.maxOutput + 1024) return "output over limit";
  if (!Array.isArray(r.changed) || !Array.isArray(r.deleted) || !Array.isArray(r.packages)) return "bad files";
  if (r.changed.length > cfg.maxFiles || !Number.isSafeInteger(r.omitted) || r.deleted.length > 100000 || r.packages.length > 10000) return "too many files";
  for (const f of r.changed) {
    if (typeof f?.path !== "string" || !Number.isSafeInteger(f.size) || f.size < 0) return "bad file";
    if (f.data !== null && (!(f.data instanceof Uint8Array) || f.data.length > cfg.maxFileBytes)) return "bad file data";
  }
  return null;
}

async function handle(m: any) {
  const id = typeof m.id === "number" ? m.id : 0;
  try {
    switch (m.op) {
      case "prime": {
        // Everything a session needs before its heap is known: the Worker started,
        // Pyodide's module imported, its wasm compiled, the base heap laid out.
        config = m.config as RuntimeConfig;
        wasm = await compileWasm(config.pyodideDir + "pyodide.asm.wasm", config.memory);
        // The Worker reads the base from its file itself, straight into wasm memory.
        const basePath = typeof m.basePath === "string" && m.basePath ? m.basePath : undefined;
        if (m.warmup && basePath) await warmUp(config, basePath);
        startWorker(config);
        await call({ op: "prime", pyodideURL: config.pyodideURL, basePath }, "primed");
        await reply(id, { ok: true, deno: Deno.version.deno });
        return;
      }
      case "boot": {
        const r = await call({
          op: "boot", pyodideURL: config!.pyodideURL, pyodideDir: config!.pyodideDir,
          lockFileURL: config!.lockFileURL, packageBaseURL: config!.packageBaseURL,
          preload: Array.isArray(m.preload) ? m.preload.map(String) : [],
          driver: await Deno.readTextFile(new URL("./driver.py", import.meta.url)),
        }, "booted");
        if (!(r.snapshot instanceof Uint8Array)) throw new Error("boot returned no snapshot");
        await reply(id, { ok: true, version: String(r.version), snapshot: r.snapshot });
        return;
      }
      case "load": {
        const cfg = config!;
        const r = await call({
          op: "init", wasm, wasmSize, pyodideURL: cfg.pyodideURL, pyodideDir: cfg.pyodideDir,
          lockFileURL: cfg.lockFileURL, packageBaseURL: cfg.packageBaseURL, memory: cfg.memory,
          interrupt, header: m.header, delta: m.delta, warm: !!m.warm,
        }, "ready", [...new Set([m.header, m.delta].filter((b) => b instanceof Uint8Array).map((b) => b.buffer as ArrayBuffer))]);
        wasm = undefined;
        await reply(id, { ok: true, timings: r.timings && typeof r.timings === "object" ? r.timings : null });
        return;
      }
      case "attach": {
        const cells = Array.isArray(m.cells) ? m.cells : [];
        Object.assign(replay, {
          id, cell: -1, stopped: -1, grace: Number(m.graceMs) || 0,
          limits: cells.map((_: unknown, i: number) => Number(m.cellTimeouts?.[i]) || 30000),
        });
        let r: any;
        try {
          r = await call({ op: "attach", reseed: !!m.reseed, files: m.files ?? [], packages: m.packages ?? [], pip: m.pip ?? [], cells, data: m.data ?? [] }, "attached");
        } finally {
          replay.timers.forEach(clearTimeout);
          new Uint8Array(interrupt).fill(0);
        }
        let error = typeof r.error === "string" ? r.error.slice(0, 4000) : null;
        if (error && replay.stopped >= 0 && replay.stopped === replay.cell) {
          error = `replay of cell ${replay.stopped + 1} was stopped at its time limit (${replay.limits[replay.stopped] / 1000} s)`;
        }
        await reply(id, { ok: true, error });
        return;
      }
      case "run": {
        outBytes = 0;
        runStarted = false;
        runNonce = Array.from(crypto.getRandomValues(new Uint32Array(2))).join("-");
        displayBytes = displayCount = displayDropped = 0;
        pipInFlight = false;
        // A stale interrupt (one that came as the last run ended) is dropped here, before
        // the Worker has the run: frames come in order, so an interrupt for this run,
        // handled after this frame, is never cleared.
        new Uint8Array(interrupt).fill(0);
        const cfg = config!;
        const r = await call({
          op: "run", run: runNonce, code: m.code, filename: m.filename, maxOutput: cfg.maxOutput, maxFileBytes: cfg.maxFileBytes,
          maxFiles: cfg.maxFiles, data: m.data ?? [],
          dataVersions: m.dataVersions && typeof m.dataVersions === "object" ? m.dataVersions : null,
          maxDisplays: cfg.maxDisplays, maxDisplayBytes: cfg.maxDisplayBytes,
          preload: Array.isArray(m.preload) ? m.preload.map(String) : [],
        }, "done");
        const bad = r.run !== runNonce ? "the reply of an earlier run: its code ran on after its answer" : checkRun(r);
        if (bad) die(`worker reply refused: ${bad}`);
        // A Worker whose code really ended answers at once. Code that posted a forged
        // "done" and goes on computing holds the Worker's thread: no answer, and the
        // process ends rather than run past its answer.
        const idle = await Promise.race([
          call({ op: "ping" }, "pong").then(() => true),
          new Promise<boolean>((res) => setTimeout(() => res(false), IDLE_WITHIN_MS)),
        ]);
        if (!idle) die("the run's code went on after its answer");
        await reply(id, {
          ok: true, status: r.status, result: typeof r.result === "string" ? str(r.result, 2 * cfg.maxOutput + 1024) : null,
          error: r.error && typeof r.error === "object"
            ? { type: str(r.error.type, 200), message: str(r.error.message, 65536), traceback: str(r.error.traceback, 262144) }
            : null,
          stdout: r.stdout, stderr: r.stderr, stdoutTruncated: !!r.stdoutTruncated, stderrTruncated: !!r.stderrTruncated,
          changed: r.changed.map((f: any) => ({ path: f.path, size: f.size, data: f.data })), omitted: r.omitted,
          deleted: strings(r.deleted, 4096), packages: strings(r.packages, 200),
          outside: Array.isArray(r.outside) ? r.outside.slice(0, 20).map((p: unknown) => str(p, 4096)) : [],
          displaysDropped: (Number.isInteger(r.displaysDropped) && r.displaysDropped > 0 ? r.displaysDropped : 0) + displayDropped,
        });
        return;
      }
      case "checkpoint": {
        // The heap as it is between runs: the engine saves it off the runs' path.
        const r = await call({ op: "checkpoint", maxBytes: typeof m.maxBytes === "number" ? m.maxBytes : config!.memory }, "checkpointed");
        await reply(id, {
          ok: true,
          header: r.header instanceof Uint8Array ? r.header : null,
          delta: r.delta instanceof Uint8Array ? r.delta : null,
          snapshotError: typeof r.snapshotError === "string" ? r.snapshotError.slice(0, 1000) : null,
          tooLarge: r.tooLarge === true,
        });
        return;
      }
      case "pipDone": {
        // The engine's answer to the install in flight (id 0: no reply).
        pipInFlight = false;
        worker?.postMessage({
          op: "pipDone", seq: m.seq, error: typeof m.error === "string" ? m.error : null,
          wheels: Array.isArray(m.wheels) ? m.wheels : [], lock: Array.isArray(m.lock) ? m.lock : [],
        });
        return;
      }
      case "interrupt": {
        const a = new Uint8Array(interrupt);
        a[1] = 1;
        a[0] = 2; // SIGINT
        return;
      }
      case "stats": {
        await reply(id, { ok: true, memory: Deno.memoryUsage() });
        return;
      }
      default:
        throw new Error(`unknown op ${String(m.op).slice(0, 40)}`);
    }
  } catch (e) {
    await reply(id, { ok: false, error: describe(e).slice(0, 4000) });
  }
}

// Frames are handled as they come: an interrupt must get through while a run waits.
for await (const m of readFrames(input, 2 ** 31)) handle(m);
// fd 3 closed: the engine is gone, and so are we.
Deno.exit(0);
