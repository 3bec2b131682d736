// The frame protocol between the Go engine and one session process, mirrored by
// sandbox/protocol.go. It runs over two pipes that only the control thread holds: the
// engine writes requests to fd 3 and reads replies from fd 4. The process's stdin is
// /dev/null and its stdout/stderr go to a capped log, so nothing user code can reach
// (the Worker's own stdio, node:fs on fds 0–2) speaks this protocol.
//
// Frame: u32 BE length of the rest, u32 BE length of a JSON header, the JSON, then binary
// blobs that the JSON points at with {"$b":[offset,length]}.

// deno-lint-ignore-file no-explicit-any

import type { DisplayKind } from "./messages.ts";

export type Blob = Uint8Array;

/** Requests from the engine. One is in flight at a time, except interrupt. */
export type Request =
  /** basePath: the packed base snapshot's file (sandbox/basepack.go). */
  | { id: number; op: "prime"; config: RuntimeConfig; basePath?: string; warmup?: boolean }
  | { id: number; op: "boot"; preload: string[] }
  | { id: number; op: "load"; header?: Blob; delta?: Blob; warm: boolean }
  /** cellTimeouts: each replayed cell's limit (ms), then graceMs before the process is stopped. */
  /** files, dirs, links, cwd: the session's saved working directory (worker/workdir.ts). */
  | { id: number; op: "attach"; reseed: boolean; files: FileBlob[]; dirs: string[]; links: Link[]; cwd: string; packages: string[]; pip: PipWheel[]; cells: string[]; cellTimeouts: number[]; graceMs: number; data: DataFile[] }
  /** data: only files the process does not hold; dataVersions: all of /data, name → version. */
  | { id: number; op: "run"; code: string; filename: string; data: DataFile[]; dataVersions: Record<string, string>; preload: string[] }
  /** The heap between runs, as a delta against the base, unless it passes maxBytes. */
  | { id: number; op: "checkpoint"; maxBytes: number }
  /** The engine's answer to a Pip request: wheels to install from the package cache. */
  | { id: 0; op: "pipDone"; seq: number; wheels: PipWheel[]; lock: string[]; error?: string }
  | { id: 0; op: "interrupt" }
  | { id: number; op: "stats" };

export type RuntimeConfig = {
  pyodideURL: string;
  pyodideDir: string;
  lockFileURL: string | null;
  packageBaseURL: string | null;
  memory: number;
  maxOutput: number;
  maxFileBytes: number;
  maxFiles: number;
  maxDisplays: number;
  maxDisplayBytes: number;
  read: string[];
  net: string[];
};

export type FileBlob = { path: string; data: Blob };
/** A symbolic link of the working directory: its path there, and its target as written. */
export type Link = { path: string; target: string };
export type PipWheel = { name: string; version: string; path: string };
/** micropip.install during a run (id 0): the engine answers with a pipDone request. */
export type Pip = { id: 0; op: "pip"; seq: number; req: { requirements: string[]; deps: boolean; keepGoing: boolean; lock: boolean } };
export type DataFile = { name: string; data: Blob };

/** Replies carry the request's id; "out" and "display" frames stream a run's output (id 0). */
export type Reply = { id: number; ok: true; [k: string]: any } | { id: number; ok: false; error: string };
/** truncated: the stream reached the output limit with this chunk; nothing follows it. */
export type Out = { id: 0; op: "out"; stream: "stdout" | "stderr"; chunk: string; truncated: boolean };
/** The run in flight starts its code (id 0): its packages are loaded, its time limit starts. */
export type Started = { id: 0; op: "started" };
/** A display item of the run in flight (id 0): a JSON MIME bundle, checked by the engine. */
export type Display = { id: 0; op: "display"; kind: DisplayKind; item: string };

const enc = new TextEncoder();
const dec = new TextDecoder();

function pack(v: any, blobs: Uint8Array[], off: { n: number }): any {
  if (v instanceof Uint8Array) {
    const r = { $b: [off.n, v.length] };
    blobs.push(v);
    off.n += v.length;
    return r;
  }
  if (Array.isArray(v)) return v.map((x) => pack(x, blobs, off));
  if (v && typeof v === "object") {
    const o: any = {};
    for (const [k, x] of Object.entries(v)) o[k] = pack(x, blobs, off);
    return o;
  }
  return v;
}

// A blob that is most of its frame (a session's heap) comes as a view
// of the frame, so it costs no copy and can be handed to the Worker as it is; smaller
// ones are copied, so that none of them keeps a large frame alive.
function unpack(v: any, bin: Uint8Array): any {
  if (Array.isArray(v)) return v.map((x) => unpack(x, bin));
  if (v && typeof v === "object") {
    if (Array.isArray(v.$b) && Object.keys(v).length === 1) {
      const b = bin.subarray(v.$b[0], v.$b[0] + v.$b[1]);
      return 2 * b.length >= bin.length ? b : b.slice();
    }
    const o: any = {};
    for (const [k, x] of Object.entries(v)) o[k] = unpack(x, bin);
    return o;
  }
  return v;
}

/** Writer of frames to the engine, in order. */
export class FrameWriter {
  #f: Deno.FsFile;
  #chain: Promise<void> = Promise.resolve();
  constructor(file: Deno.FsFile) {
    // Plain writes: a pipe's WritableStream (file.writable) here does not flush.
    this.#f = file;
  }
  send(msg: Reply | Out | Display | Pip | Record<string, unknown>): Promise<void> {
    const blobs: Uint8Array[] = [];
    const json = enc.encode(JSON.stringify(pack(msg, blobs, { n: 0 })));
    const binLen = blobs.reduce((a, b) => a + b.length, 0);
    const head = new Uint8Array(8);
    const dv = new DataView(head.buffer);
    dv.setUint32(0, 4 + json.length + binLen);
    dv.setUint32(4, json.length);
    let parts = [head, json, ...blobs];
    if (8 + json.length + binLen <= 4 << 20) {
      // One write per frame: the Go reader wakes once instead of once per part.
      const one = new Uint8Array(8 + json.length + binLen);
      let o = 0;
      for (const p of parts) {
        one.set(p, o);
        o += p.length;
      }
      parts = [one];
    }
    this.#chain = this.#chain.then(async () => {
      for (const p of parts) {
        for (let o = 0; o < p.length;) o += await this.#f.write(p.subarray(o));
      }
    });
    return this.#chain;
  }
}

/** Reads the engine's frames. A frame's body is read straight into one buffer of its
 * size: a large frame (a session's heap) is neither gathered from chunks nor copied. */
export async function* readFrames(file: Deno.FsFile, maxFrame: number): AsyncGenerator<any> {
  const buf = new Uint8Array(64 << 10);
  let start = 0, end = 0;
  const more = async (): Promise<boolean> => {
    if (start === end) start = end = 0;
    if (end === buf.length) {
      buf.copyWithin(0, start, end);
      end -= start;
      start = 0;
    }
    const n = await file.read(buf.subarray(end));
    if (n === null) return false;
    end += n;
    return true;
  };
  for (;;) {
    while (end - start < 4) if (!await more()) return;
    const n = new DataView(buf.buffer, start, 4).getUint32(0);
    if (n < 4 || n > maxFrame) throw new Error(`bad frame length ${n}`);
    start += 4;
    const body = new Uint8Array(n);
    let o = Math.min(n, end - start);
    body.set(buf.subarray(start, start + o));
    start += o;
    while (o < n) {
      const k = await file.read(body.subarray(o));
      if (k === null) return;
      o += k;
    }
    const jl = new DataView(body.buffer).getUint32(0);
    if (jl > n - 4) throw new Error(`bad json length ${jl}`);
    yield unpack(JSON.parse(dec.decode(body.subarray(4, 4 + jl))), body.subarray(4 + jl));
  }
}

// describe renders anything thrown as one readable line: an Error's message, a string,
// or an object's message or JSON, never "[object Object]".
export function describe(e: unknown): string {
  if (e instanceof Error) return e.message;
  if (typeof e === "string") return e;
  const m = (e as { message?: unknown } | null)?.message;
  if (typeof m === "string") return m;
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return Object.prototype.toString.call(e);
  }
}
