// The one Pyodide interpreter of a session process, run as a Worker by its control
// thread (host.ts); this module is its entry, the modules beside it one job each (see
// runtime/README.md). User code shares this realm (Python reaches it through `js` and
// `pyodide_js`), so whatever this Worker says is the user's word: the control thread
// and the engine check it. The real boundaries are the process, confined by the
// kernel, and the Deno permissions set by host.ts.
//
// What the Worker keeps of the realm is taken as its modules load: the real
// Memory.prototype.grow (memory.ts), postMessage (post.ts), WebAssembly.instantiate
// (wasm.ts), and the memory limit's controls, by this module (memoryControl). A module
// graph is evaluated whole, imports first, before this module's body sets onmessage; no
// Python exists before the control thread's first message (prime, then init or boot).
// So no user code runs before all of them are taken, and none can reach them after:
// they live in module scope, which globalThis does not hold. User code can import() a
// module already loaded (that needs no permission) and call its exports: none of them
// gives it a power it lacks through `js`, and the limit's controls are taken already.

/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />

import type { ToWorker } from "../messages.ts";
import { describe } from "../protocol.ts";
import { attach } from "./attach.ts";
import { openBase, takeBase } from "./base.ts";
import { boot } from "./boot.ts";
import { heapState, liveDelta } from "./checkpoint.ts";
import { dataHeapRestored } from "./data.ts";
import { quietRun, reseed } from "./driver.ts";
import { harden } from "./harden.ts";
import { ignoreInterrupts, useInterruptBuffer } from "./interrupt.ts";
import { memoryControl } from "./memory.ts";
import { connectOutput } from "./output.ts";
import { pipAnswered } from "./pip.ts";
import { post } from "./post.ts";
import { importPyodide, loadPyodide } from "./pyodide.ts";
import { restoreDone, restoreFrom } from "./restore.ts";
import { run } from "./run.ts";
import { moduleShared, shareModule } from "./wasm.ts";

const memory = memoryControl();

// A spare Worker: loaded and ready to restore a session without paying for starting a
// Worker and importing Pyodide.
async function prime(m: Extract<ToWorker, { op: "prime" }>) {
  await importPyodide(m.pyodideURL);
  if (typeof m.basePath === "string" && m.basePath) openBase(m.basePath, !m.warmup);
  post({ op: "primed" });
}

// init loads the interpreter from the base opened by prime, with the session's heap
// when the message carries one, and readies it for a session.
async function init(m: Extract<ToWorker, { op: "init" }>) {
  memory.setLimit(m.memory);
  useInterruptBuffer(m.interrupt);
  const t0 = performance.now();
  const base = takeBase();
  if (!base) throw new Error("no base snapshot to load");
  const snapshot = restoreFrom(base, m.header, m.delta, memory.growPastLimit);
  dataHeapRestored(!!m.delta);
  const t1 = performance.now();
  if (m.wasm instanceof WebAssembly.Module) shareModule(m.wasm, m.wasmSize);
  let unread = true;
  try {
    await loadPyodide(m, snapshot);
  } finally {
    unread = restoreDone();
    // The heap is in wasm memory now: the file is done with.
    base.file.close();
  }
  if (unread) throw new Error("Pyodide loaded without asking for the heap: its snapshot layout changed");
  const timings = { prepare: t1 - t0, load: performance.now() - t1, sharedWasm: m.wasm && moduleShared() ? 1 : 0 };
  // Interrupts reach user code only (run.ts, attach.ts).
  ignoreInterrupts();
  connectOutput();
  harden();
  if (m.warm) {
    // A pool Worker waits for a new session: pay now for what its first run would (the
    // RNG seed, first passes through the driver and the heap diff), not then.
    await reseed();
    await quietRun("None", "<warmup>");
    // The heap diff is JavaScript, compiled per isolate: warming it up helps only the
    // Worker that will save the session's heap, not a warm-up Worker.
    if (!m.warmup) {
      try {
        liveDelta();
      } catch { /* only warming up */ }
    }
  }
  post({ op: "ready", timings });
}

async function handle(m: ToWorker) {
  switch (m.op) {
    case "boot":
      return await boot(m);
    case "prime":
      return await prime(m);
    case "init":
      return await init(m);
    case "attach":
      return post({ op: "attached", error: await attach(m) });
    case "run":
      return await run(m);
    case "ping": // the run's "done" came from here, not from code still running
      return post({ op: "pong" });
    case "checkpoint":
      return post({ op: "checkpointed", ...(await heapState(typeof m.maxBytes === "number" ? m.maxBytes : Infinity)) });
    case "pipDone":
      return pipAnswered(m);
    default:
      m satisfies never;
  }
}

// A KeyboardInterrupt raised inside Pyodide's event loop surfaces as an unhandled
// rejection; left alone it would take the whole Worker down.
self.addEventListener("unhandledrejection", (e: PromiseRejectionEvent) => e.preventDefault());
// Likewise an exception thrown later by JS that user code scheduled (a timer, say): it is
// the user's bug, not a reason to lose the session.
self.addEventListener("error", (e: ErrorEvent) => e.preventDefault());

self.onmessage = async ({ data: m }: MessageEvent<ToWorker>) => {
  try {
    await handle(m);
  } catch (e) {
    // The stack names server paths: it goes to the process's log; the session is told
    // what failed in one line (never "[object Object]").
    console.error(`worker op ${String(m?.op).slice(0, 40)} failed: ${String((e as Error)?.stack ?? describe(e)).slice(0, 4000)}`);
    post({ op: "failed", error: describe(e) });
  }
};
