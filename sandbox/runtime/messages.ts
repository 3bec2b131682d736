// The messages between a session process's control thread (host.ts) and its Worker
// (worker/main.ts), one union each way, imported by both sides.
//
// The control thread's messages are the process's own. The Worker's are the user's:
// Python reaches postMessage through `js`, so any of them may be forged. The host reads
// each as Said<…>: the field names of the message it claims to be, every value unknown
// until the host has checked it.

import type { DataFile, FileBlob, Link, PipWheel } from "./protocol.ts";

/** Where the Worker imports Pyodide from, and where Pyodide finds its packages. */
export type PyodideAt = {
  pyodideURL: string;
  pyodideDir: string;
  lockFileURL: string | null;
  packageBaseURL: string | null;
};

/** A run's bounds, from the session's configuration. */
export type RunLimits = {
  maxOutput: number;
  maxFileBytes: number;
  maxFiles: number;
  maxDisplays: number;
  maxDisplayBytes: number;
};

/** Control thread → Worker. */
export type ToWorker =
  /** A spare: Pyodide imported, the packed base opened (basePath); warmup: a throwaway
   * Worker that never saves a heap. */
  | { op: "prime"; pyodideURL: string; basePath?: string; warmup?: boolean }
  /** A fresh interpreter with the driver installed, whose heap becomes a base. driver:
   * the driver's sources (display.py, driver.py), run in this order. */
  | ({ op: "boot"; preload: string[]; driver: string[] } & PyodideAt)
  /** The interpreter restored from the base, with a session's heap when header and delta
   * come; wasm: Pyodide's module, compiled once by the control thread. */
  | ({
    op: "init";
    wasm?: WebAssembly.Module;
    wasmSize: number;
    memory: number;
    interrupt: SharedArrayBuffer;
    header?: Uint8Array;
    delta?: Uint8Array;
    warm: boolean;
    warmup?: boolean;
  } & PyodideAt)
  /** The session becomes live: its files (and directories, links, current directory),
   * packages, and the cells to replay. */
  | {
    op: "attach";
    reseed: boolean;
    files: FileBlob[];
    dirs: string[];
    links: Link[];
    cwd: string;
    packages: string[];
    pip: PipWheel[];
    cells: string[];
    data: DataFile[];
  }
  /** run: the run's nonce, echoed in everything the Worker sends for it. */
  | ({
    op: "run";
    run: string;
    code: string;
    filename: string;
    data: DataFile[];
    dataVersions: Record<string, string> | null;
    preload: string[];
  } & RunLimits)
  /** Answered only by a Worker whose thread is free (the run's code has ended). */
  | { op: "ping" }
  | { op: "checkpoint"; maxBytes: number }
  /** The engine's answer to a "pip" of the Worker's. */
  | { op: "pipDone"; seq: number; error: string | null; wheels: PipWheel[]; lock: string[] };

export type RunError = { type: string; message: string; traceback: string };
/** A file of the working directory the run created or changed; data null when it is
 * over the size limit. */
export type ChangedFile = { path: string; size: number; data: Uint8Array | null };

/** The end of a run, as the Worker reports it. */
export type RunDone = {
  op: "done";
  run: string;
  status: "success" | "error" | "timeout";
  result: string | null;
  error: RunError | null;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  changed: ChangedFile[];
  omitted: number;
  /** Directories and symbolic links of the working directory the run made (or
   * retargeted); deleted: the paths, of any kind, it took away. */
  dirs: string[];
  links: Link[];
  deleted: string[];
  /** The interpreter's current directory, when the run moved it; null when it did not. */
  cwd: string | null;
  /** Entries the run made that the session cannot keep (a path too long, or not text). */
  unkept: number;
  outside: string[];
  packages: string[];
  timings: Record<string, number>;
  displaysDropped: number;
};

/** The heap between runs: a delta against the base, or why there is none. */
export type HeapState = { header?: Uint8Array; delta?: Uint8Array; snapshotError?: string; tooLarge?: boolean };

/** What a display frame is: an item, a trailing expression's rich form, an update of the
 * items of a display_id, or a clear of what the run showed (the engine's
 * sandchat.DisplayItem, DisplayResult, DisplayUpdate, DisplayClear). */
export type DisplayKind = "display" | "result" | "update" | "clear";

/** isDisplayKind tells whether a Worker's word names a kind of display frame. */
export function isDisplayKind(k: unknown): k is DisplayKind {
  return k === "display" || k === "result" || k === "update" || k === "clear";
}

/** Worker → control thread. */
export type FromWorker =
  | { op: "primed" }
  | { op: "booted"; version: string; snapshot: Uint8Array }
  | { op: "ready"; timings: Record<string, number> }
  | { op: "attached"; error: string | null }
  /** Replay of cell index starts: its time limit starts. */
  | { op: "replaying"; index: number }
  /** The run's code starts: its packages are loaded, its time limit starts. */
  | { op: "started" }
  | { op: "out"; run: string; stream: "stdout" | "stderr"; chunk: string; truncated: boolean }
  | { op: "display"; run: string; kind: DisplayKind; item: string }
  /** micropip.install: req is the install request's JSON, for the engine to resolve. */
  | { op: "pip"; seq: number; req: string }
  | RunDone
  | { op: "pong" }
  | ({ op: "checkpointed" } & HeapState)
  | { op: "failed"; error: string };

/** What the Worker says, as the control thread receives it: the fields of the message it
 * claims to be, none of them checked yet. */
export type Said<M> = M extends { op: infer O } ? { op: O } & { [K in Exclude<keyof M, "op">]?: unknown } : never;

/** The reply of op E, as said. */
export type SaidOf<E extends FromWorker["op"]> = Said<Extract<FromWorker, { op: E }>>;

// Every op of FromWorker, held to the type by the compiler (deno check).
const fromWorkerOps: Record<FromWorker["op"], true> = {
  primed: true, booted: true, ready: true, attached: true, replaying: true, started: true, out: true,
  display: true, pip: true, done: true, pong: true, checkpointed: true, failed: true,
};

/** said reads a message of the Worker's: null unless it is an object naming one of the
 * ops a Worker sends. */
export function said(data: unknown): Said<FromWorker> | null {
  if (typeof data !== "object" || data === null) return null;
  const op = (data as { op?: unknown }).op;
  return typeof op === "string" && Object.hasOwn(fromWorkerOps, op) ? data as Said<FromWorker> : null;
}
