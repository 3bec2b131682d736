// The sandbox host: a Deno process started by the Go engine, speaking length-prefixed
// frames on stdin/stdout, running one Worker per live session. Frame: u32 BE length of
// the rest, u32 BE length of a JSON header, the JSON, then binary blobs that the JSON
// points at with {"$b":[offset,length]}.
//
// Every message from a Worker is untrusted: user code runs in the Worker's realm and can
// post anything. The host binds each Worker to its session itself and accepts only the
// replies it is waiting for, checked for shape and size.

// deno-lint-ignore-file no-explicit-any

type Pending = { resolve: (v: any) => void; reject: (e: Error) => void; expect: string; nonce: string };

function newNonce(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

class Session {
  worker: Worker;
  sab = new SharedArrayBuffer(2);
  pending: Pending | null = null;
  runId = 0;
  outBytes = 0;
  dead = false;
  constructor(public sid: string, public baseHash: string) {
    this.worker = new Worker(new URL("./worker.ts", import.meta.url), {
      type: "module",
      deno: { permissions: workerPermissions() } as any,
    } as any);
    this.worker.onmessage = (e) => this.onMessage(e.data);
    this.worker.onerror = (e) => {
      e.preventDefault();
      this.fail(`worker error: ${e.message}`);
    };
    this.worker.onmessageerror = (e) => {
      e.preventDefault();
      this.fail("worker sent a message that cannot be read");
    };
  }

  call(msg: any, expect: string, transfer: Transferable[] = []): Promise<any> {
    if (this.dead) return Promise.reject(new Error("worker is gone"));
    if (this.pending) return Promise.reject(new Error("worker is busy"));
    return new Promise((resolve, reject) => {
      const nonce = newNonce();
      this.pending = { resolve, reject, expect, nonce };
      this.worker.postMessage({ ...msg, nonce }, transfer);
    });
  }

  onMessage(m: any) {
    if (this.dead || typeof m !== "object" || m === null) return;
    const p = this.pending;
    if (!p || m.nonce !== p.nonce) return; // not an answer to the host: a forgery, dropped
    if (m.op === "out") {
      // Live output of the current run only; the run's final reply carries the full text.
      if (p.expect !== "done" || m.run !== this.runId) return;
      if (typeof m.chunk !== "string" || (m.stream !== "stdout" && m.stream !== "stderr")) return;
      this.outBytes += m.chunk.length;
      if (this.outBytes > 4 * config.maxOutput + 65536) return;
      send({ op: "out", sid: this.sid, stream: m.stream, chunk: m.chunk });
      return;
    }
    if (m.op === "failed") {
      this.pending = null;
      p.reject(new Error(typeof m.error === "string" ? m.error.slice(0, 4000) : "worker failed"));
      return;
    }
    if (m.op !== p.expect) return;
    if (m.op === "done" && m.run !== this.runId) return;
    this.pending = null;
    p.resolve(m);
  }

  fail(reason: string) {
    if (this.dead) return;
    this.dead = true;
    try {
      this.worker.terminate();
    } catch { /* already gone */ }
    const p = this.pending;
    this.pending = null;
    p?.reject(new Error(reason));
  }
}

let config: any = { maxOutput: 1 << 20, memory: 512 << 20, poolSize: 0 };
const bases = new Map<string, SharedArrayBuffer>();
let currentBase = "";
const sessions = new Map<string, Session>();
const pool: Session[] = [];
let filling = false;
let poolSeq = 0;

function workerPermissions() {
  return {
    read: config.read ?? [],
    net: config.net && config.net.length ? config.net : false,
    env: false,
    run: false,
    write: false,
    ffi: false,
    sys: false,
    import: false,
  };
}

let wasm: WebAssembly.Module | undefined;
let wasmSize = 0;
const spares: Session[] = [];
let sparing = false;

// Keeps one primed Worker per host for restoring saved sessions.
async function fillSpares() {
  if (sparing) return;
  sparing = true;
  try {
    while (spares.length < (config.spares ?? 1) && currentBase) {
      const s = new Session(`spare-${++poolSeq}`, "");
      try {
        await s.call({ op: "prime", pyodideURL: config.pyodideURL, base: bases.get(currentBase), baseHash: currentBase }, "primed");
        spares.push(s);
      } catch (e) {
        s.fail(String(e));
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  } finally {
    sparing = false;
  }
}

function initMsg(s: Session, extra: any = {}) {
  return {
    op: "init",
    wasm,
    wasmSize,
    pyodideURL: config.pyodideURL,
    pyodideDir: config.pyodideDir,
    lockFileURL: config.lockFileURL,
    packageBaseURL: config.packageBaseURL,
    memory: config.memory,
    interrupt: s.sab,
    base: bases.get(s.baseHash),
    baseHash: s.baseHash,
    ...extra,
  };
}

// Keeps config.poolSize workers restored from the current base, so a new session does
// not pay for loading an interpreter.
async function fillPool() {
  if (filling) return;
  filling = true;
  try {
    while (pool.length < config.poolSize && currentBase) {
      const s = new Session(`pool-${++poolSeq}`, currentBase);
      try {
        await s.call(initMsg(s, { warm: true }), "ready");
        pool.push(s);
      } catch (e) {
        s.fail(String(e));
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  } finally {
    filling = false;
  }
}

// ---- framing ----

const enc = new TextEncoder();
const dec = new TextDecoder();
const stdout = Deno.stdout.writable.getWriter();
let writing: Promise<void> = Promise.resolve();

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

function unpack(v: any, bin: Uint8Array): any {
  if (Array.isArray(v)) return v.map((x) => unpack(x, bin));
  if (v && typeof v === "object") {
    if (Array.isArray(v.$b) && Object.keys(v).length === 1) return bin.slice(v.$b[0], v.$b[0] + v.$b[1]);
    const o: any = {};
    for (const [k, x] of Object.entries(v)) o[k] = unpack(x, bin);
    return o;
  }
  return v;
}

function send(msg: any) {
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
  writing = writing.then(async () => {
    for (const p of parts) await stdout.write(p);
  });
}

async function* frames(): AsyncGenerator<{ msg: any; bin: Uint8Array }> {
  const reader = Deno.stdin.readable.getReader();
  // Chunks are joined only once a whole frame is there: joining on every read would
  // copy a large frame (a session's heap) quadratically.
  let chunks: Uint8Array[] = [];
  let have = 0;
  const take = (n: number): Uint8Array => {
    const out = new Uint8Array(n);
    let o = 0;
    while (o < n) {
      const c = chunks[0];
      const k = Math.min(c.length, n - o);
      out.set(c.subarray(0, k), o);
      o += k;
      if (k === c.length) chunks.shift();
      else chunks[0] = c.subarray(k);
    }
    have -= n;
    return out;
  };
  const peek4 = (): number => {
    const b = chunks[0].length >= 4 ? chunks[0] : take(4);
    if (b !== chunks[0]) {
      chunks.unshift(b);
      have += 4;
    }
    return new DataView(b.buffer, b.byteOffset).getUint32(0);
  };
  for (;;) {
    while (have >= 4) {
      const n = peek4();
      if (have < 4 + n) break;
      take(4);
      const body = take(n);
      const jl = new DataView(body.buffer).getUint32(0);
      yield { msg: JSON.parse(dec.decode(body.subarray(4, 4 + jl))), bin: body.subarray(4 + jl) };
    }
    const { value, done } = await reader.read();
    if (done) return;
    chunks.push(value);
    have += value.length;
  }
}

// ---- operations ----

function sizeOK(m: any): string | null {
  if (typeof m.status !== "string" || !["success", "error", "timeout"].includes(m.status)) return "bad status";
  if (typeof m.stdout !== "string" || typeof m.stderr !== "string") return "bad output";
  if (m.stdout.length > 2 * config.maxOutput + 1024 || m.stderr.length > 2 * config.maxOutput + 1024) return "output over limit";
  if (!Array.isArray(m.changed) || !Array.isArray(m.deleted) || !Array.isArray(m.packages)) return "bad files";
  for (const f of m.changed) if (typeof f?.path !== "string" || !(f.data instanceof Uint8Array)) return "bad file";
  return null;
}

async function handle(msg: any, bin: Uint8Array) {
  const m = unpack(msg, bin);
  const reply = (r: any) => send({ id: m.id, ...r });
  try {
    switch (m.op) {
      case "config": {
        config = { ...config, ...m.config };
        const bytes = await Deno.readFile(config.pyodideDir + "pyodide.asm.wasm");
        wasmSize = bytes.byteLength;
        wasm = await WebAssembly.compile(bytes);
        fillSpares();
        reply({ ok: true, deno: Deno.version.deno });
        return;
      }
      case "boot": {
        const s = new Session("boot", "");
        try {
          const r = await s.call({ op: "boot", pyodideURL: config.pyodideURL, pyodideDir: config.pyodideDir }, "booted");
          if (!(r.snapshot instanceof Uint8Array)) throw new Error("boot returned no snapshot");
          reply({ ok: true, version: String(r.version), snapshot: r.snapshot });
        } finally {
          s.fail("done");
        }
        return;
      }
      case "base": {
        const snap: Uint8Array = m.snapshot;
        const sab = new SharedArrayBuffer(snap.length);
        new Uint8Array(sab).set(snap);
        bases.set(m.hash, sab);
        if (m.current) {
          currentBase = m.hash;
          for (const s of pool.splice(0)) s.fail("base changed");
          for (const s of spares.splice(0)) s.fail("base changed");
        }
        reply({ ok: true });
        fillPool();
        fillSpares();
        return;
      }
      case "pool": {
        config.poolSize = m.size;
        while (pool.length > m.size) pool.pop()!.fail("pool shrunk");
        reply({ ok: true });
        fillPool();
        return;
      }
      case "open": {
        sessions.get(m.sid)?.fail("reopened");
        sessions.delete(m.sid);
        if (!bases.has(m.base)) throw new Error(`base ${m.base} not loaded`);
        const t0 = performance.now();
        let s: Session | undefined;
        let from = "new";
        let timings: any = null;
        if (!m.delta && m.base === currentBase && pool.length) {
          s = pool.shift()!;
          s.sid = m.sid;
          from = "pool";
        } else {
          s = spares.shift();
          if (s && !s.dead) {
            s.sid = m.sid;
            s.baseHash = m.base;
            from = "spare";
          } else {
            s = new Session(m.sid, m.base);
          }
          try {
            const r = await s.call(initMsg(s, { header: m.header, delta: m.delta }), "ready");
            if (r.timings && typeof r.timings === "object") timings = r.timings;
          } catch (e) {
            s.fail(String(e));
            throw e;
          }
        }
        sessions.set(m.sid, s);
        const r = await s.call({ op: "attach", reseed: !!m.reseed, files: m.files ?? [], packages: m.packages ?? [], cells: m.cells ?? [] }, "attached");
        reply({ ok: true, from, ms: performance.now() - t0, timings, error: typeof r.error === "string" ? r.error.slice(0, 4000) : null });
        // Refill once the session's first run is under way: starting a Worker and loading
        // an interpreter would otherwise compete with it for the CPU.
        setTimeout(() => {
          fillPool();
          fillSpares();
        }, 300);
        return;
      }
      case "run": {
        const s = sessions.get(m.sid);
        if (!s || s.dead) throw new Error("no such session");
        s.runId++;
        s.outBytes = 0;
        new Uint8Array(s.sab)[1] = 0;
        const r = await s.call({
          op: "run", run: s.runId, code: m.code, filename: m.filename, maxOutput: config.maxOutput,
          persist: !!m.persist, replay: !!m.replay, data: m.data ?? [],
        }, "done");
        const bad = sizeOK(r);
        if (bad) {
          s.fail(`worker reply refused: ${bad}`);
          sessions.delete(m.sid);
          throw new Error(`worker reply refused: ${bad}`);
        }
        reply({
          ok: true, status: r.status, result: typeof r.result === "string" ? r.result : null,
          error: r.error && typeof r.error === "object"
            ? { type: String(r.error.type), message: String(r.error.message), traceback: String(r.error.traceback ?? "") }
            : null,
          stdout: r.stdout, stderr: r.stderr, stdoutTruncated: !!r.stdoutTruncated, stderrTruncated: !!r.stderrTruncated,
          changed: r.changed, deleted: r.deleted.map(String), packages: r.packages.map(String),
          header: r.header instanceof Uint8Array ? r.header : null,
          delta: r.delta instanceof Uint8Array ? r.delta : null,
          snapshotError: typeof r.snapshotError === "string" ? r.snapshotError.slice(0, 1000) : null,
          timings: r.timings && typeof r.timings === "object" ? r.timings : null,
        });
        return;
      }
      case "interrupt": {
        const s = sessions.get(m.sid);
        if (s) {
          const a = new Uint8Array(s.sab);
          a[1] = 1;
          a[0] = 2; // SIGINT
        }
        return;
      }
      case "close": {
        sessions.get(m.sid)?.fail("closed");
        sessions.delete(m.sid);
        reply({ ok: true });
        return;
      }
      case "stats": {
        reply({ ok: true, sessions: sessions.size, pool: pool.length, spares: spares.length, filling: filling || sparing, memory: Deno.memoryUsage() });
        return;
      }
      default:
        throw new Error(`unknown op ${m.op}`);
    }
  } catch (e) {
    reply({ ok: false, error: String((e as Error)?.message ?? e) });
  }
}

for await (const { msg, bin } of frames()) {
  handle(msg, bin);
}
// stdin closed: the engine is gone, and so are we.
Deno.exit(0);
