// The control thread of one session process. The Go engine starts one such process per
// live session (and per warm-pool spare), confined by bubblewrap and a cgroup; it holds
// the protocol (protocol.ts) on fds 3 and 4, and runs Pyodide in one Worker
// (worker/main.ts) so that an interrupt can reach Python through a SharedArrayBuffer
// while it runs.
//
// Python reaches JavaScript in the Worker's realm, so everything the Worker posts is
// treated as the user's (messages.ts, Said): checked for shape and size here, and again
// by the engine. A session can only ever forge its own results: no other session lives
// in this process.

import { describe, FrameWriter, readFrames, type Request, type RuntimeConfig } from "./protocol.ts";
import { compileWasm } from "./compile.ts";
import { type FromWorker, isDisplayKind, type RunDone, type RunError, said, type Said, type SaidOf, type ToWorker } from "./messages.ts";

const input = await Deno.open("/dev/fd/3", { read: true });
const output = new FrameWriter(await Deno.open("/dev/fd/4", { write: true }));
const reply = (id: number, r: Record<string, unknown>) => output.send({ id, ...r });

let config: RuntimeConfig | null = null;
let worker: Worker | null = null;
// Pyodide's wasm, compiled by "prime", until the session's Worker takes it ("load").
let wasm: { module: WebAssembly.Module; size: number } | undefined;
const interrupt = new SharedArrayBuffer(2);
// How long a Worker has to show it is idle after its "done" (a busy machine included).
const IDLE_WITHIN_MS = 2000;
// The driver's sources, in the order the Worker runs them (driver.py calls display.py's
// steps).
const DRIVER = ["display.py", "driver.py"];

// What the run in flight has sent so far, started afresh by each "run". nonce names the
// run: the Worker echoes it in what it sends for that run, and a "done" of an earlier run
// means that run's code kept going after its answer (it had posted a forged one): the
// process is ended, since its state is no longer the saved one.
let current = {
  nonce: "",
  started: false, // the run said its code started (once per run)
  outBytes: 0,
  displayBytes: 0,
  displays: 0,
  displaysDropped: 0,
  pip: false, // a micropip.install of the run waits for the engine
};

// The replay of an attach: each cell gets its time limit, then an interrupt, then the
// grace; a cell that outlives both ends the process, and the engine is told which.
const replay = { id: 0, limits: [] as number[], grace: 0, cell: -1, stopped: -1, timers: [] as ReturnType<typeof setTimeout>[] };

// The one call to the Worker in flight: the op of the reply it waits for.
type Pending = { expect: FromWorker["op"]; resolve: (m: Said<FromWorker>) => void; reject: (e: Error) => void };
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
  const options = {
    type: "module",
    deno: {
      permissions: {
        read: cfg.read, net: cfg.net.length ? cfg.net : false,
        env: false, run: false, write: false, ffi: false, sys: false, import: false,
      },
    },
  };
  return new Worker(new URL("./worker/main.ts", import.meta.url), options as WorkerOptions);
}

const pyodideAt = (cfg: RuntimeConfig) => ({
  pyodideURL: cfg.pyodideURL, pyodideDir: cfg.pyodideDir, lockFileURL: cfg.lockFileURL, packageBaseURL: cfg.packageBaseURL,
});

// warmUp restores the base interpreter once in a throwaway Worker: V8 compiles Pyodide's
// wasm lazily, and the compiled code belongs to the module, which the session's Worker
// shares. A spare pays this while it waits, not the restore that takes it (~0.3 s).
function warmUp(cfg: RuntimeConfig, basePath: string): Promise<void> {
  const w = newWorker(cfg);
  const send = (m: ToWorker) => w.postMessage(m);
  return new Promise<void>((resolve, reject) => {
    w.onmessage = ({ data }) => {
      const m = said(data);
      if (m?.op === "primed") {
        send({
          op: "init", wasm: wasm?.module, wasmSize: wasm?.size ?? 0, ...pyodideAt(cfg), memory: cfg.memory,
          interrupt: new SharedArrayBuffer(2), warm: true, warmup: true,
        });
      } else if (m?.op === "ready") resolve();
      else reject(new Error("warm-up failed"));
    };
    w.onerror = (e) => {
      e.preventDefault();
      reject(new Error(`warm-up: ${e.message}`));
    };
    send({ op: "prime", pyodideURL: cfg.pyodideURL, basePath, warmup: true });
  }).finally(() => w.terminate());
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

const safeInt = (v: unknown): v is number => Number.isSafeInteger(v);

function sigint() {
  const a = new Uint8Array(interrupt);
  a[1] = 1;
  a[0] = 2; // SIGINT
}

function onWorker(data: unknown) {
  const m = said(data);
  if (!m) return;
  const p = pending;
  if (m.op === "pip") {
    // micropip.install: the engine resolves, fetches and verifies; the session only
    // ever gets paths into the read-only package cache. One request at a time.
    if (!safeInt(m.seq) || typeof m.req !== "string") return;
    const seq = m.seq;
    let req: { requirements?: unknown; deps?: unknown; keepGoing?: unknown; lock?: unknown } | null = null;
    try {
      if (m.req.length <= 65536) req = JSON.parse(m.req);
    } catch { /* answered below */ }
    const refuse = (error: string) => worker?.postMessage({ op: "pipDone", seq, error, wheels: [], lock: [] } satisfies ToWorker);
    if (p?.expect !== "done") return refuse("micropip.install is only available while code runs");
    if (current.pip) return refuse("another micropip.install is in progress in this session");
    if (!req || typeof req !== "object" || !Array.isArray(req.requirements)) return refuse("unreadable install request");
    current.pip = true;
    output.send({
      id: 0, op: "pip", seq,
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
        sigint();
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
    if (p.expect === "done" && !current.started) {
      current.started = true;
      output.send({ id: 0, op: "started" });
    }
    return;
  }
  if (m.op === "out") {
    if (p.expect !== "done" || typeof m.chunk !== "string" || (m.stream !== "stdout" && m.stream !== "stderr")) return;
    current.outBytes += m.chunk.length;
    if (current.outBytes > 4 * config!.maxOutput + 65536) return;
    output.send({ id: 0, op: "out", stream: m.stream, chunk: m.chunk, truncated: m.truncated === true });
    return;
  }
  if (m.op === "display") {
    // Bounded here as well as in the Worker (whose word is the user's): the engine
    // validates each item and keeps its own count.
    if (p.expect !== "done" || typeof m.item !== "string" || !isDisplayKind(m.kind)) return;
    if (m.kind === "clear") {
      // What came before it is gone: the items after it count afresh.
      current.displays = 0;
      current.displayBytes = 0;
    }
    current.displayBytes += m.item.length;
    if (m.kind === "display" || m.kind === "result") current.displays++;
    if (current.displays > config!.maxDisplays || current.displayBytes > config!.maxDisplayBytes) {
      current.displaysDropped++;
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

// call sends the Worker msg and waits for its reply of op expect, as said.
function call<E extends FromWorker["op"]>(msg: ToWorker, expect: E, transfer: Transferable[] = []): Promise<SaidOf<E>> {
  if (!worker) return Promise.reject(new Error("not primed"));
  if (pending) return Promise.reject(new Error("busy"));
  return new Promise((resolve, reject) => {
    pending = { expect, resolve: resolve as (m: Said<FromWorker>) => void, reject };
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

// readRun checks a run's reply, as the Worker said it, against what an honest Worker
// sends, and bounds what may go to the engine: the reply, or why it is refused.
function readRun(r: SaidOf<"done">, cfg: RuntimeConfig): Omit<RunDone, "op" | "run" | "timings"> | string {
  const { status, stdout, stderr, changed, deleted, packages, omitted, dirs, links, cwd, unkept } = r;
  if (status !== "success" && status !== "error" && status !== "timeout") return "bad status";
  if (typeof stdout !== "string" || typeof stderr !== "string") return "bad output";
  if (stdout.length > 2 * cfg.maxOutput + 1024 || stderr.length > 2 * cfg.maxOutput + 1024) return "output over limit";
  if (!Array.isArray(changed) || !Array.isArray(deleted) || !Array.isArray(packages)) return "bad files";
  if (changed.length > cfg.maxFiles || !safeInt(omitted) || deleted.length > 100000 || packages.length > 10000) return "too many files";
  if (!Array.isArray(dirs) || !Array.isArray(links) || dirs.length > cfg.maxFiles || links.length > cfg.maxFiles) return "bad directories or links";
  if (!safeInt(unkept) || unkept < 0 || (cwd !== null && (typeof cwd !== "string" || cwd.length > 4096))) return "bad working directory";
  const made: RunDone["links"] = [];
  for (const l of links as unknown[]) {
    const { path, target } = (l ?? {}) as { path?: unknown; target?: unknown };
    if (typeof path !== "string" || typeof target !== "string") return "bad link";
    made.push({ path: path.slice(0, 4096), target: target.slice(0, 4096) });
  }
  const files: RunDone["changed"] = [];
  for (const f of changed as unknown[]) {
    const { path, size, data } = (f ?? {}) as { path?: unknown; size?: unknown; data?: unknown };
    if (typeof path !== "string" || !safeInt(size) || size < 0) return "bad file";
    if (data !== null && (!(data instanceof Uint8Array) || data.length > cfg.maxFileBytes)) return "bad file data";
    files.push({ path, size, data });
  }
  const e = r.error as Partial<Record<keyof RunError, unknown>> | null | undefined;
  const dropped = r.displaysDropped;
  return {
    status, result: typeof r.result === "string" ? str(r.result, 2 * cfg.maxOutput + 1024) : null,
    error: e && typeof e === "object" ? { type: str(e.type, 200), message: str(e.message, 65536), traceback: str(e.traceback, 262144) } : null,
    stdout, stderr, stdoutTruncated: !!r.stdoutTruncated, stderrTruncated: !!r.stderrTruncated,
    changed: files, omitted, dirs: strings(dirs, 4096), links: made, cwd, unkept,
    deleted: strings(deleted, 4096), packages: strings(packages, 200),
    outside: Array.isArray(r.outside) ? r.outside.slice(0, 20).map((p: unknown) => str(p, 4096)) : [],
    displaysDropped: (Number.isInteger(dropped) && (dropped as number) > 0 ? dropped as number : 0),
  };
}

async function handle(m: Request) {
  const id = typeof m.id === "number" ? m.id : 0;
  try {
    switch (m.op) {
      case "prime": {
        // Everything a session needs before its heap is known: the Worker started,
        // Pyodide's module imported, its wasm compiled, the base heap laid out.
        config = m.config;
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
          op: "boot", ...pyodideAt(config!),
          preload: Array.isArray(m.preload) ? m.preload.map(String) : [],
          driver: await Promise.all(DRIVER.map((f) => Deno.readTextFile(new URL("./" + f, import.meta.url)))),
        }, "booted");
        if (!(r.snapshot instanceof Uint8Array)) throw new Error("boot returned no snapshot");
        await reply(id, { ok: true, version: String(r.version), snapshot: r.snapshot });
        return;
      }
      case "load": {
        const cfg = config!;
        const blobs = [m.header, m.delta].filter((b): b is Uint8Array => b instanceof Uint8Array);
        const r = await call({
          op: "init", wasm: wasm?.module, wasmSize: wasm?.size ?? 0, ...pyodideAt(cfg), memory: cfg.memory,
          interrupt, header: m.header, delta: m.delta, warm: !!m.warm,
        }, "ready", [...new Set(blobs.map((b) => b.buffer as ArrayBuffer))]);
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
        let r: SaidOf<"attached">;
        try {
          r = await call({
            op: "attach", reseed: !!m.reseed, files: m.files ?? [], dirs: m.dirs ?? [], links: m.links ?? [], cwd: typeof m.cwd === "string" ? m.cwd : "",
            packages: m.packages ?? [], pip: m.pip ?? [], cells, data: m.data ?? [],
          }, "attached");
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
        const nonce = Array.from(crypto.getRandomValues(new Uint32Array(2))).join("-");
        current = { nonce, started: false, outBytes: 0, displayBytes: 0, displays: 0, displaysDropped: 0, pip: false };
        // A stale interrupt (one that came as the last run ended) is dropped here, before
        // the Worker has the run: frames come in order, so an interrupt for this run,
        // handled after this frame, is never cleared.
        new Uint8Array(interrupt).fill(0);
        const cfg = config!;
        const r = await call({
          op: "run", run: nonce, code: m.code, filename: m.filename, maxOutput: cfg.maxOutput, maxFileBytes: cfg.maxFileBytes,
          maxFiles: cfg.maxFiles, data: m.data ?? [],
          dataVersions: m.dataVersions && typeof m.dataVersions === "object" ? m.dataVersions : null,
          maxDisplays: cfg.maxDisplays, maxDisplayBytes: cfg.maxDisplayBytes,
          preload: Array.isArray(m.preload) ? m.preload.map(String) : [],
        }, "done");
        const run = r.run !== nonce ? "the reply of an earlier run: its code ran on after its answer" : readRun(r, cfg);
        if (typeof run === "string") die(`worker reply refused: ${run}`);
        // A Worker whose code really ended answers at once. Code that posted a forged
        // "done" and goes on computing holds the Worker's thread: no answer, and the
        // process ends rather than run past its answer.
        const idle = await Promise.race([
          call({ op: "ping" }, "pong").then(() => true),
          new Promise<boolean>((res) => setTimeout(() => res(false), IDLE_WITHIN_MS)),
        ]);
        if (!idle) die("the run's code went on after its answer");
        await reply(id, { ok: true, ...run, displaysDropped: run.displaysDropped + current.displaysDropped });
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
        current.pip = false;
        worker?.postMessage({
          op: "pipDone", seq: m.seq, error: typeof m.error === "string" ? m.error : null,
          wheels: Array.isArray(m.wheels) ? m.wheels : [], lock: Array.isArray(m.lock) ? m.lock : [],
        } satisfies ToWorker);
        return;
      }
      case "interrupt": {
        sigint();
        return;
      }
      case "stats": {
        await reply(id, { ok: true, memory: Deno.memoryUsage() });
        return;
      }
      default:
        throw new Error(`unknown op ${String((m as { op?: unknown }).op).slice(0, 40)}`);
    }
  } catch (e) {
    await reply(id, { ok: false, error: describe(e).slice(0, 4000) });
  }
}

// Frames are handled as they come: an interrupt must get through while a run waits.
for await (const m of readFrames(input, 2 ** 31)) handle(m);
// fd 3 closed: the engine is gone, and so are we.
Deno.exit(0);
