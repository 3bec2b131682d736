// The one Pyodide interpreter of a session process. User code shares this realm (Python
// reaches it through `js` and `pyodide_js`), so whatever this Worker says is the user's
// word: the control thread (host.ts) and the engine check it. The real boundaries are the
// process, confined by the kernel, and the Deno permissions set by host.ts.

// deno-lint-ignore-file no-explicit-any
import { describe } from "./protocol.ts";

// Diff granularity: small blocks keep unchanged bytes out of the delta (a run touches
// a few hundred scattered words), at 4 bytes of index per changed block.
const PAGE = 256;
const WORKDIR = "/home/pyodide";
const DATADIR = "/data";

// Kept in closures so user code, which can reach globalThis through Python's `js`
// module, cannot undo the cap or forge the host's view of this worker.
const realGrow = WebAssembly.Memory.prototype.grow;
const postRaw = globalThis.postMessage.bind(globalThis);
const post = (m: any, transfer: Transferable[] = []) => postRaw(m, transfer);
let memoryCap = 512 * 1024 * 1024;
WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
  // Refusing growth makes malloc fail inside the interpreter: Python raises MemoryError
  // and the session lives on.
  if (this.buffer.byteLength + pages * 65536 > memoryCap) {
    throw new RangeError("sandbox memory limit reached");
  }
  return realGrow.call(this, pages);
};

// The driver lives in its own module so that user globals stay clean, and is installed
// before the base snapshot is taken, so every restored session already has it.
// (Its source is runtime/driver.py, handed over by the control thread with "boot".)

let py: any;
let interrupt: Uint8Array;

// ---- micropip: requests to the engine, installs from its cache ----
type PipWheel = { name: string; version: string; path: string };
let pipInstalled: PipWheel[] = [];
let pipSeq = 0;
const pipWaiting = new Map<number, (r: any) => void>();
const normName = (n: string) => n.toLowerCase().replace(/[-_.]+/g, "-");

function installedNames(): Set<string> {
  const s = new Set(pipInstalled.map((w) => normName(w.name)));
  for (const n of Object.keys(py?.loadedPackages ?? {})) s.add(normName(n));
  return s;
}

async function installWheels(lock: string[], wheels: PipWheel[]) {
  if (lock?.length) {
    const errors: string[] = [];
    await py.loadPackage(lock, { messageCallback: () => {}, errorCallback: (e: string) => errors.push(String(e)) });
    if (errors.length) throw new Error(errors.join("; ").slice(0, 500));
  }
  for (const w of wheels ?? []) {
    const buf = await Deno.readFile(w.path);
    const file = w.path.slice(w.path.lastIndexOf("/") + 1);
    if (typeof py._api?.install === "function") {
      // Pyodide's own installer: unpacks into site-packages and loads any shared library.
      await py._api.install(buf, file, py._api.sitepackages, new Map([["INSTALLER", "micropip"]]));
    } else {
      py.unpackArchive(buf, "wheel", { extractDir: py._api.sitepackages });
    }
    pipInstalled.push({ name: w.name, version: w.version, path: w.path });
  }
}

(globalThis as any).sandchatPip = async (ask: unknown): Promise<string> => {
  let req: any;
  try {
    req = JSON.parse(String(ask));
  } catch {
    return JSON.stringify({ error: "unreadable install request" });
  }
  // Installed already (a replayed cell, or a notebook run twice): nothing to ask for.
  const have = installedNames();
  const wanted = (Array.isArray(req?.requirements) ? req.requirements : []).map((r: unknown) => /^\s*([A-Za-z0-9][A-Za-z0-9._-]*)/.exec(String(r))?.[1]);
  if (wanted.length && wanted.every((n: string | undefined) => n && have.has(normName(n)))) return JSON.stringify({});
  const seq = ++pipSeq;
  const r: any = await new Promise((resolve) => {
    pipWaiting.set(seq, resolve);
    post({ op: "pip", seq, req: String(ask) });
  });
  if (r?.error) return JSON.stringify({ error: String(r.error) });
  try {
    await installWheels(r.lock ?? [], r.wheels ?? []);
  } catch (e) {
    return JSON.stringify({ error: `the install failed: ${String((e as Error)?.message ?? e).slice(0, 500)}` });
  }
  return JSON.stringify({ installed: (r.wheels ?? []).map((w: PipWheel) => w.name), lock: r.lock ?? [] });
};

// An import no finder resolved (importlib.import_module, __import__, a name the engine
// did not see in the code): when a package of the Pyodide distribution provides the
// module, the driver's finder asks the engine for it here, as micropip.install would,
// within the run's package bounds. "" when no package provides it.
// The distribution's package that provides a module not yet loaded; "" when none does.
(globalThis as any).sandchatImportable = (name: unknown): string => {
  const pkg = py?._api?._import_name_to_package_name?.get?.(String(name));
  return typeof pkg === "string" && !installedNames().has(normName(pkg)) ? pkg : "";
};
(globalThis as any).sandchatImport = async (name: unknown): Promise<string> => {
  const pkg = py?._api?._import_name_to_package_name?.get?.(String(name));
  if (typeof pkg !== "string" || installedNames().has(normName(pkg))) return "";
  return await (globalThis as any).sandchatPip(JSON.stringify({ requirements: [pkg], deps: true, keepGoing: false, lock: true }));
};

(globalThis as any).sandchatPipList = (): string => {
  const out: { name: string; version: string; source: string }[] = [];
  const lockPkgs = py?._api?.lockfile_packages ?? {};
  for (const n of Object.keys(py?.loadedPackages ?? {})) {
    out.push({ name: n, version: String(lockPkgs[n]?.version ?? ""), source: "pyodide" });
  }
  for (const w of pipInstalled) out.push({ name: w.name, version: w.version, source: "pip" });
  return JSON.stringify(out);
};

// sandchatSleep is time.sleep for the session (driver.py installs it): Pyodide's own
// busy-waits and never looks at the interrupt buffer, so a Stop or a time limit would wait
// for the sleep to end and the run's state could be lost to a kill. This one waits in
// short slices without spinning and answers true, consuming the interrupt, as soon as the
// host asks the code to stop; Python then raises KeyboardInterrupt there.
const sleepCell = new Int32Array(new SharedArrayBuffer(4)); // nobody writes it: waits time out
// What Pyodide watches outside user code: nobody writes it (see "init").
const idleInterrupt = new Uint8Array(new SharedArrayBuffer(2));
(globalThis as any).sandchatSleep = (secs: unknown): boolean => {
  const end = performance.now() + Math.max(0, Number(secs)) * 1000;
  for (;;) {
    if (interrupt && interrupt[0] !== 0) {
      interrupt[0] = 0; // raised once, by the caller; interrupt[1] still says it came
      return true;
    }
    const left = end - performance.now();
    if (!(left > 0)) return false;
    Atomics.wait(sleepCell, 0, 0, Math.min(left, 10));
  }
};

// forgetProvided keeps Pyodide from loading a package of its distribution for a module
// the driver provides (driver.py, `provided`): sandchat's micropip, the IPython.display
// shim. `from IPython.display import HTML` then loads nothing, as the engine fetches
// nothing for it (pkgs.Provided).
function forgetProvided() {
  let names: string[] = ["micropip"];
  try {
    const mod = py.pyimport("_sandchat");
    try {
      const p = mod.provided;
      names = typeof p?.toJs === "function" ? p.toJs() : names;
      p?.destroy?.();
    } finally {
      mod.destroy();
    }
  } catch { /* at boot, before the driver is installed */ }
  for (const n of names) {
    try {
      py._api._import_name_to_package_name?.delete?.(String(n));
    } catch { /* an older layout */ }
  }
}
let files = new Map<string, string>(); // path -> "mtime:size" of the working dir after the last run

function heapOffset(s: Uint8Array): number {
  return new DataView(s.buffer, s.byteOffset, s.byteLength).getUint32(4, true);
}

// What this process keeps of the base snapshot once its interpreter is loaded: the
// fixed part of its header and a hash of every block of its heap (~1 MB, computed by the
// engine once per base), instead of the base's ~31 MB. The engine keeps the base itself
// (one copy for all sessions) and XORs the blocks sent here against it before it stores
// them.
let baseFixed = new Uint8Array(0);
let baseHeapLen = 0;
let baseHashes = new Int32Array(0);
// The base snapshot's file, until the interpreter is loaded from it (restoreFrom).
let prepared: PackedBase | null = null;

// The base snapshot as the engine packs it into a file (sandbox/basepack.go): its
// header, a hash of every block of its heap, then only the heap pages that are not all
// zeros. The pages stay in the file (in the page cache, shared by the node's processes)
// until fillHeap reads them straight into wasm memory.
type PackedBase = {
  file: Deno.FsFile;
  header: Uint8Array;
  heapLen: number;
  slot: Int32Array; // per page of the heap: its place among the pages in the file, -1 for zeros
  dataAt: number; // where the pages start in the file, OS_PAGE bytes each
  hashes: Int32Array; // two lanes (hashBlock) per PAGE block of the heap
};

// readAt fills into from the file at offset at.
function readAt(f: Deno.FsFile, at: number, into: Uint8Array) {
  f.seekSync(at, Deno.SeekMode.Start);
  for (let o = 0; o < into.length;) {
    const n = f.readSync(into.subarray(o));
    if (!n) throw new Error("base snapshot: the file ends early");
    o += n;
  }
}

const BASE_HEAD = 32;

function readBase(path: string): PackedBase {
  const file = Deno.openSync(path, { read: true });
  try {
    const head = new Uint8Array(BASE_HEAD);
    readAt(file, 0, head);
    const dv = new DataView(head.buffer);
    const [hl, heapLen, page, n, block, blocks] = [0, 1, 2, 3, 4, 5].map((i) => dv.getUint32(4 * i, true));
    const pad = (x: number) => (x + 15) & ~15;
    const idxAt = BASE_HEAD + pad(hl), hashAt = idxAt + pad(4 * n);
    const dataAt = Math.ceil((hashAt + 8 * blocks) / OS_PAGE) * OS_PAGE;
    if (page !== OS_PAGE || block !== PAGE || blocks !== Math.floor(heapLen / PAGE) || hl < HEADER_FIXED ||
      dataAt + n * page > file.statSync().size) {
      throw new Error("base snapshot: bad packed layout");
    }
    const meta = new Uint8Array(hashAt + 8 * blocks - BASE_HEAD);
    readAt(file, BASE_HEAD, meta);
    const idx = new Uint32Array(meta.buffer, idxAt - BASE_HEAD, n);
    const slot = new Int32Array(Math.ceil(heapLen / page)).fill(-1);
    for (let k = 0; k < n; k++) {
      if (idx[k] >= slot.length) throw new Error("base snapshot: page past the heap");
      slot[idx[k]] = k;
    }
    const hashes = new Int32Array(meta.buffer, hashAt - BASE_HEAD, 2 * blocks);
    return { file, header: meta.subarray(0, hl), heapLen, slot, dataAt, hashes };
  } catch (e) {
    file.close();
    throw e;
  }
}

let hash2 = 0;
// hashBlock hashes one block (PAGE bytes from word s) into two 32-bit lanes that fail in
// different ways, so that a change goes unseen only if both miss it: the first runs two
// multiply-xorshift chains (even and odd words), the second is a sum of the words
// weighted by odd numbers that depend on their place in the heap, which sees any change
// of a single word. Returns the first lane; the second is in hash2. The engine hashes
// the base the same way (sandbox/basepack.go, blockHash; basepack_test.go holds the two
// together).
// hashBlock:begin
function hashBlock(w32: Int32Array, s: number): number {
  let h1 = 0x2545f491, h2 = 0x6a09e667, h3 = 0x3c6ef372;
  for (let i = s, e = s + (PAGE >> 2); i < e; i += 2) {
    const w = w32[i], v = w32[i + 1];
    h1 = Math.imul(h1 ^ w, 0x9e3779b1) ^ (h1 >>> 15);
    h3 = Math.imul(h3 ^ v, 0x85ebca6b) ^ (h3 >>> 13);
    h2 = (h2 + Math.imul(w, (i << 1) | 1) + Math.imul(v, (i << 1) | 3)) | 0;
  }
  hash2 = h2;
  return h1 ^ Math.imul(h3, 0xcc9e2d51);
}
// hashBlock:end

// indexBase keeps what a checkpoint needs of the base: its header's fixed part, and the
// hashes of its blocks.
function indexBase(b: PackedBase) {
  baseFixed = b.header.slice(0, HEADER_FIXED + 1);
  baseHeapLen = b.heapLen;
  baseHashes = b.hashes;
}

// The session's state travels as the heap blocks that differ from the base's, as they
// are; the engine XORs them with the base's before storing them. Layout: u32 heap length,
// u32 block count, u32 block size, u32 block indexes, then the blocks.
function diff(snap: Uint8Array): { header: Uint8Array; delta: Uint8Array } {
  const ho = heapOffset(snap);
  return { header: snap.slice(0, ho), delta: diffHeap(snap.subarray(ho)) };
}

// Pyodide's snapshot is a header (magic, heap offset, JSON length, 0, 32-byte build id,
// then the JSON of its JS-side state) followed by a copy of the whole heap. Building the
// header ourselves and diffing the live heap in place skips copying ~30 MB per run.
const HEADER_FIXED = 48;

function macrotask(): Promise<void> {
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => {
      ch.port1.close();
      resolve();
    };
    ch.port2.postMessage(0);
  });
}

// DeltaTooLarge is a heap whose delta would pass the session's state limit: it is not
// built at all, so a checkpoint never needs memory the session was not granted.
class DeltaTooLarge extends Error {}

function liveDelta(maxBytes = Infinity): { header: Uint8Array; delta: Uint8Array } {
  if (baseFixed[HEADER_FIXED] !== 0x7b /* { */ && baseFixed[HEADER_FIXED] !== 0x5b /* [ */) {
    return diff(py.makeMemorySnapshot()); // a layout we do not know: take the slow path
  }
  const json = JSON.stringify(py._api.serializeHiwireState(undefined));
  const n = Math.ceil((HEADER_FIXED + 2 * json.length) / 16) * 16;
  const header = new Uint8Array(n);
  header.set(baseFixed.subarray(0, HEADER_FIXED));
  const { written } = new TextEncoder().encodeInto(json, header.subarray(HEADER_FIXED));
  const u = new Uint32Array(header.buffer);
  u[1] = n;
  u[2] = written;
  u[3] = 0;
  const h8 = py._module.HEAP8;
  return { header, delta: diffHeap(new Uint8Array(h8.buffer, h8.byteOffset, h8.length), maxBytes) };
}

function diffHeap(heap: Uint8Array, maxBytes = Infinity): Uint8Array {
  const n = Math.ceil(heap.length / PAGE);
  const hashed = baseHashes.length >> 1;
  const changed: number[] = [];
  const aligned = (heap.byteOffset & 3) === 0 && heap.length % PAGE === 0;
  const h32 = new Int32Array(heap.buffer, heap.byteOffset, aligned ? heap.length >> 2 : 0);
  for (let p = 0; p < n; p++) {
    if (!aligned || (p >= hashed && p * PAGE < baseHeapLen)) {
      changed.push(p);
    } else if (p < hashed) {
      if (hashBlock(h32, p * (PAGE >> 2)) !== baseHashes[2 * p] || hash2 !== baseHashes[2 * p + 1]) changed.push(p);
    } else {
      // Past the base heap the restored memory starts zeroed: only non-zero blocks count.
      for (let i = p * (PAGE >> 2), e = i + (PAGE >> 2); i < e; i++) {
        if (h32[i] !== 0) {
          changed.push(p);
          break;
        }
      }
    }
  }
  if (changed.length * PAGE > maxBytes) {
    throw new DeltaTooLarge(`the heap differs from the base by ${(changed.length * PAGE / 1048576).toFixed(1)} MiB, over the session's ${(maxBytes / 1048576).toFixed(1)} MiB state limit`);
  }
  const out = new Uint8Array(12 + changed.length * 4 + changed.length * PAGE);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, heap.length, true);
  dv.setUint32(4, changed.length, true);
  dv.setUint32(8, PAGE, true);
  let o = 12;
  for (const p of changed) {
    dv.setUint32(o, p, true);
    o += 4;
  }
  for (const p of changed) {
    out.set(heap.subarray(p * PAGE, Math.min((p + 1) * PAGE, heap.length)), o);
    o += PAGE;
  }
  return out;
}

// A restore writes the heap into wasm memory itself, a page at a time, instead of
// letting Pyodide copy a whole snapshot in: half of the base heap is pages of zeros (the
// C stack's unused depth, the free top of the heap), which the engine does not even send,
// and a fresh wasm memory is zero already, so those pages are never touched. Untouched,
// they cost neither a page fault (~2-35 us each on the development VM) nor resident
// memory for as long as the session lives. The session's blocks go straight into memory
// after the base's pages.
const OS_PAGE = 4096;

type HeapRestore = { base: PackedBase; heapLen: number; delta?: Uint8Array; memory?: WebAssembly.Memory };
// The heap the next load restores; taken by HeaderSnapshot when Pyodide asks for it.
let pendingHeap: HeapRestore | null = null;

// HeaderSnapshot is what Pyodide is given to load: a snapshot header whose heap offset is
// its own length, i.e. a snapshot with an empty heap. Pyodide's restoreSnapshot reads the
// header, then copies subarray(heapOffset) into wasm memory: at that moment (the module
// instantiated and initialised, the heap not yet loaded, as before) the heap is written
// by fillHeap and the copy is of nothing.
class HeaderSnapshot extends Uint8Array {
  override subarray(begin?: number, end?: number): Uint8Array<ArrayBuffer> {
    if (end === undefined && begin === this.length && pendingHeap?.memory) {
      const r = pendingHeap;
      pendingHeap = null;
      fillHeap(r, r.memory!);
      return new Uint8Array(0);
    }
    return super.subarray(begin, end);
  }
}

function isZero(w32: Int32Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (w32[i] !== 0) return false;
  return true;
}

function fillHeap(r: HeapRestore, memory: WebAssembly.Memory) {
  const dst = new Uint8Array(memory.buffer);
  const d32 = new Int32Array(memory.buffer);
  if (dst.length < r.heapLen) throw new Error(`wasm memory (${dst.length} bytes) smaller than the heap to restore (${r.heapLen})`);
  const { slot, file, dataAt } = r.base;
  const pages = Math.ceil(r.heapLen / OS_PAGE);
  for (let p = 0; p < pages;) {
    const o = p * OS_PAGE;
    const k = p < slot.length ? slot[p] : -1;
    if (k >= 0) {
      // A run of pages that lie one after the other in the file too: one read, from the
      // page cache into wasm memory.
      let q = p + 1;
      while (q < pages && q < slot.length && slot[q] === k + (q - p)) q++;
      readAt(file, dataAt + k * OS_PAGE, dst.subarray(o, Math.min(q * OS_PAGE, r.heapLen)));
      p = q;
      continue;
    }
    const e = Math.min(o + OS_PAGE, r.heapLen);
    if ((o & 3) !== 0 || (e & 3) !== 0 || !isZero(d32, o >> 2, e >> 2)) {
      // Memory the runtime wrote while it started: zeros, as the snapshot has them. A
      // page never written reads as zeros without being made resident.
      dst.fill(0, o, e);
    }
    p++;
  }
  if (!r.delta) return;
  const dv = new DataView(r.delta.buffer, r.delta.byteOffset, r.delta.byteLength);
  const count = dv.getUint32(4, true), page = dv.getUint32(8, true);
  let o = 12 + count * 4;
  for (let k = 0; k < count; k++) {
    const start = dv.getUint32(12 + k * 4, true) * page;
    const end = Math.min(start + page, r.heapLen);
    if (start < end) dst.set(r.delta.subarray(o, o + end - start), start);
    o += page;
  }
}

// restoreFrom prepares the next load: the header Pyodide reads, and the heap it restores
// (the base's, with the session's blocks when there is a delta).
function restoreFrom(base: PackedBase, header?: Uint8Array, delta?: Uint8Array): HeaderSnapshot {
  const h = delta && header ? header : base.header;
  const heapLen = delta ? new DataView(delta.buffer, delta.byteOffset, delta.byteLength).getUint32(0, true) : base.heapLen;
  const snap = new HeaderSnapshot(h.length);
  snap.set(h);
  new DataView(snap.buffer).setUint32(4, h.length, true);
  pendingHeap = { base, heapLen, delta };
  restoreHeapBytes = heapLen;
  return snap;
}

function walk(dir: string, out: Map<string, string>) {
  const FS = py.FS;
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    // lstat: a symlink (dangling or not) is not followed, so it can neither break the
    // walk nor pull a file from outside the working directory into the results.
    const st = FS.lstat(p);
    if (FS.isDir(st.mode)) walk(p, out);
    else if (FS.isFile(st.mode)) out.set(p, `${new Date(st.mtime).getTime()}:${st.size}`);
  }
}

function writeFile(path: string, data: Uint8Array) {
  const FS = py.FS;
  const parts = path.split("/").filter(Boolean);
  let d = "";
  for (const part of parts.slice(0, -1)) {
    d += "/" + part;
    try {
      FS.mkdir(d);
    } catch { /* exists */ }
  }
  FS.writeFile(path, data);
}

function rmTree(dir: string) {
  const FS = py.FS;
  let names: string[];
  try {
    names = FS.readdir(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    if (FS.isDir(FS.lstat(p).mode)) {
      rmTree(p);
      FS.rmdir(p);
    } else FS.unlink(p);
  }
}

function setDirModes(dir: string, mode: number) {
  const FS = py.FS;
  FS.chmod(dir, mode);
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    if (FS.isDir(FS.lstat(dir + "/" + name).mode)) setDirModes(dir + "/" + name, mode);
  }
}

// SHA-256 of each file under /data as last mounted; null when unknown (a new process or
// a restored heap), so every module imported from /data counts as changed.
let dataHashes: Map<string, string> | null = null;
// heapRestored: the interpreter is a session's saved heap, which may hold modules
// imported from /data; one from the base holds none.
let heapRestored = false;

// DATA_SYNC makes /data importable and drops the modules imported from files that
// changed or went away, so the next import runs the new code.
const DATA_SYNC = String.raw`
import sys
if "/data" not in sys.path:
    sys.path.append("/data")
# Only the finders of /data and its folders forget what they listed (the driver's
# forget_listings): importlib.invalidate_caches() rewrites ~2.3 MB of a restored heap.
__import__("_sandchat").forget_listings("/data")
for _name, _mod in list(sys.modules.items()):
    _file = str(getattr(_mod, "__file__", None) or "")
    if _file.startswith("/data/") and (every or _file[len("/data/"):] in set(changed)):
        del sys.modules[_name]
`;

async function mountData(data: { name: string; data: Uint8Array }[]) {
  const FS = py.FS;
  try {
    setDirModes(DATADIR, 0o755);
  } catch {
    FS.mkdir(DATADIR);
  }
  rmTree(DATADIR);
  for (const f of data) {
    writeFile(DATADIR + "/" + f.name, f.data);
    FS.chmod(DATADIR + "/" + f.name, 0o444);
  }
  setDirModes(DATADIR, 0o555);
  const hashes = new Map<string, string>();
  for (const f of data) {
    const h = new Uint8Array(await crypto.subtle.digest("SHA-256", f.data));
    hashes.set(f.name, Array.from(h, (b) => b.toString(16).padStart(2, "0")).join(""));
  }
  resync(hashes);
}

// resync makes /data importable and drops the modules imported from files that changed
// or went away since the last mount (now: name → version). A restored heap's history is
// unknown, so every module from /data counts as changed; a base interpreter's is empty.
function resync(now: Map<string, string>) {
  let changed: string[] | null = heapRestored && dataHashes === null ? null : [];
  if (dataHashes !== null) {
    changed = [...dataHashes.keys()].filter((name) => now.get(name) !== dataHashes!.get(name));
    changed.push(...[...now.keys()].filter((name) => !dataHashes!.has(name)));
  } else if (changed !== null) {
    changed = [...now.keys()];
  }
  if (changed === null || changed.length > 0) {
    const ns = py.toPy({ every: changed === null, changed: changed ?? [] });
    try {
      py.runPython(DATA_SYNC, { globals: ns, filename: "<sandchat>" });
    } finally {
      ns.destroy();
    }
  }
  dataHashes = now;
}

// syncData brings /data to the engine's listing (name → version) sending only the files
// that are new or changed; the others are here already, as the last sync left them. A
// run whose uploads did not change costs no copy, no hash and no file system work.
async function syncData(data: { name: string; data: Uint8Array }[], versions: Record<string, string>) {
  const want = new Map(Object.entries(versions));
  const same = dataHashes !== null && want.size === dataHashes.size && [...want].every(([n, v]) => dataHashes!.get(n) === v);
  if (data.length === 0 && (same || (dataHashes === null && want.size === 0 && !heapRestored))) return;
  const FS = py.FS;
  try {
    setDirModes(DATADIR, 0o755);
  } catch {
    FS.mkdir(DATADIR);
  }
  const incoming = new Set(data.map((f) => f.name));
  const held = new Map<string, string>();
  walk(DATADIR, held);
  for (const p of held.keys()) {
    const name = p.slice(DATADIR.length + 1);
    if (!want.has(name) || incoming.has(name)) FS.unlink(p);
  }
  pruneDirs(DATADIR);
  for (const f of data) {
    writeFile(DATADIR + "/" + f.name, f.data);
    FS.chmod(DATADIR + "/" + f.name, 0o444);
  }
  setDirModes(DATADIR, 0o555);
  resync(want);
}

// pruneDirs removes the directories under dir that hold no file.
function pruneDirs(dir: string): boolean {
  const FS = py.FS;
  let empty = true;
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    if (FS.isDir(FS.lstat(p).mode) && pruneDirs(p)) FS.rmdir(p);
    else empty = false;
  }
  return empty;
}

// Powers a session must not have. Permissions already deny processes, env, FFI and
// writes; these are the ones permissions do not cover.
function harden() {
  const g = globalThis as any;
  for (const name of ["Worker", "SharedWorker", "close", "caches", "CacheStorage", "Cache", "BroadcastChannel"]) {
    try {
      delete g[name];
    } catch { /* non-configurable */ }
  }
  const D = g.Deno;
  for (const name of ["exit", "kill", "Command", "run", "dlopen", "openKv", "serve", "listen", "listenTls", "connect", "connectTls", "startTls", "upgradeWebSocket", "chmod", "chmodSync", "chown", "chownSync"]) {
    try {
      Object.defineProperty(D, name, {
        value: () => {
          throw new Error(`Deno.${name} is not available in the sandbox`);
        },
        writable: false,
        configurable: false,
      });
    } catch { /* already locked */ }
  }
  try {
    delete g.process; // node compatibility globals carry exit() and friends
  } catch { /* ignore */ }
  try {
    Object.defineProperty(g.navigator, "gpu", { value: undefined, configurable: false });
  } catch { /* ignore */ }
  // console writes to the host's stderr, i.e. the server's logs.
  const quiet = () => {};
  for (const name of ["log", "info", "warn", "error", "debug", "trace", "dir", "table"]) {
    try {
      g.console[name] = quiet;
    } catch { /* ignore */ }
  }
}

// The host compiles pyodide.asm.wasm once and hands every Worker the compiled module:
// Pyodide's own load would compile ~10 MB of wasm again in each one.
let wasmModule: WebAssembly.Module | undefined;
let wasmSize = 0;
// A session whose heap grew past the module's initial memory: Pyodide copies the saved
// heap into memory as it is after instantiation, so it must be grown to fit first.
let restoreHeapBytes = 0;
const realInstantiate = WebAssembly.instantiate;

// release frees the memory of a buffer no longer needed at once, whoever still holds it:
// the buffer is detached, and its contents move to one that is dropped.
function release(b: ArrayBuffer | ArrayBufferView) {
  const ab = ArrayBuffer.isView(b) ? b.buffer : b;
  if (ab instanceof ArrayBuffer && !ab.detached) ab.transfer(0);
}

(WebAssembly as any).instantiate = async function (src: any, imports?: any) {
  let result: any;
  if (wasmModule && !(src instanceof WebAssembly.Module) && src?.byteLength === wasmSize) {
    const mod = wasmModule;
    wasmModule = undefined;
    // The loader read the wasm file only to hear that it is compiled already. Its copy
    // (~9 MB) would live as long as the loader's closures, i.e. the process: release it.
    release(src);
    result = { module: mod, instance: await realInstantiate(mod, imports) };
  } else {
    result = await (realInstantiate as any)(src, imports);
  }
  const instance = result instanceof WebAssembly.Instance ? result : result.instance;
  const mem = instance?.exports?.memory;
  if (restoreHeapBytes && mem instanceof WebAssembly.Memory) {
    const pages = Math.ceil((restoreHeapBytes - mem.buffer.byteLength) / 65536);
    if (pages > 0) realGrow.call(mem, pages);
    restoreHeapBytes = 0;
    if (pendingHeap) pendingHeap.memory = mem;
  }
  return result;
};

let pyodideModule: any;
let initTimings: Record<string, number> = {};
let reseeded = false;

async function prime(m: any) {
  pyodideModule ??= await import(m.pyodideURL + "pyodide.mjs");
  // Pyodide's Emscripten module (1.2 MB of JavaScript): imported here, a spare has it
  // parsed before a restore needs it (the loader imports the same URL).
  await import(m.pyodideURL + "pyodide.asm.mjs");
}

async function load(m: any, snapshot?: Uint8Array) {
  await prime(m);
  if (m.wasm instanceof WebAssembly.Module) {
    wasmModule = m.wasm;
    wasmSize = m.wasmSize;
  }
  const { loadPyodide } = pyodideModule;
  const opts: any = {
    indexURL: m.pyodideDir,
    _makeSnapshot: true,
    stdout: () => {},
    stderr: () => {},
  };
  if (m.lockFileURL) opts.lockFileURL = m.lockFileURL;
  if (m.packageBaseURL) opts.packageBaseUrl = m.packageBaseURL;
  if (snapshot) opts._loadSnapshot = snapshot;
  const loaded = await loadPyodide(opts);
  // The snapshot is in wasm memory now: no reference to it may outlive the load.
  delete opts._loadSnapshot;
  if (loaded._api?.config) delete loaded._api.config._loadSnapshot;
  py = loaded;
  forgetProvided();
  return loaded;
}

const discard = (b: Uint8Array) => b.length;
// Output goes to the current run's sinks; installing Pyodide's handlers once keeps
// four FFI calls off every run.
const sinks = { stdout: discard, stderr: discard };
let outLimit = 1 << 20;
let runId = 0;

// makeSink is one stream of a run's output. before runs ahead of each write: it sends
// what the other stream holds back, so the chunks go out in the order they were written.
function makeSink(stream: string, state: { bytes: number; text: string; truncated: boolean }, before: () => void) {
  const dec = new TextDecoder();
  let pending = "";
  let last = -Infinity;
  let cutSent = false;
  // The chunk that reaches the limit says so: the engine marks the output it kept from
  // the stream as cut, as the run's reply does, should the reply never come.
  const flush = () => {
    if (!pending && !(state.truncated && !cutSent)) return;
    post({ op: "out", run: runId, stream, chunk: pending, truncated: state.truncated });
    cutSent = state.truncated;
    pending = "";
    last = performance.now();
  };
  const write = (buf: Uint8Array) => {
    if (state.truncated) return buf.length;
    before();
    let b = buf;
    if (state.bytes + b.length > outLimit) {
      b = b.subarray(0, Math.max(0, outLimit - state.bytes));
      state.truncated = true;
    }
    state.bytes += b.length;
    const s = dec.decode(b, { stream: !state.truncated });
    state.text += s;
    pending += s;
    // Chunks go out as they come unless the program prints faster than 20 a second.
    if (pending.length >= 8192 || performance.now() - last > 50 || state.truncated) flush();
    return buf.length;
  };
  return { write, flush };
}

// Display items of the run in progress, as the driver's display() hands them over: sent
// at once (after the output before them), bounded in count and bytes. What does not fit
// is counted, and the engine says so.
const displays = { active: false, count: 0, bytes: 0, max: 0, maxBytes: 0, dropped: 0, flush: () => {} };
(globalThis as any).sandchatDisplay = (kind: unknown, item: unknown) => {
  if (!displays.active || typeof kind !== "string" || typeof item !== "string") return;
  if (displays.count >= displays.max || displays.bytes + item.length > displays.maxBytes) {
    displays.dropped++;
    return;
  }
  displays.count++;
  displays.bytes += item.length;
  displays.flush();
  post({ op: "display", run: runId, kind, item });
};

async function run(m: any) {
  const t0 = performance.now();
  const timings: Record<string, number> = {};
  const lap = (name: string) => (timings[name] = performance.now() - t0);
  runId = m.run;
  outLimit = m.maxOutput;
  await syncData(m.data ?? [], m.dataVersions && typeof m.dataVersions === "object" ? m.dataVersions : {});
  const before = files;
  const startMs = Date.now();
  const tmpBefore = new Map<string, string>();
  try { walk("/tmp", tmpBefore); } catch { /* no /tmp */ }
  const out = { bytes: 0, text: "", truncated: false }, err = { bytes: 0, text: "", truncated: false };
  const so: { write: (b: Uint8Array) => number; flush: () => void } = makeSink("stdout", out, () => se.flush());
  const se: { write: (b: Uint8Array) => number; flush: () => void } = makeSink("stderr", err, () => so.flush());
  sinks.stdout = so.write;
  sinks.stderr = se.write;
  Object.assign(displays, { active: true, count: 0, bytes: 0, dropped: 0, max: m.maxDisplays ?? 0, maxBytes: m.maxDisplayBytes ?? 0 });
  displays.flush = () => {
    so.flush();
    se.flush();
  };
  let status = "success", result: string | null = null, error: any = null, compiled: string[] = [];
  const loadErrors: string[] = [];
  // Loading packages (the preload's and the code's imports) comes before the run's time
  // limit; importing them is Python, and counts.
  if (m.preload?.length) {
    // Validated module names (the engine checks them), imported before the code.
    const code = m.preload.map((n: string) => `import ${n}`).join("\n");
    await py.loadPackagesFromImports(code, { messageCallback: () => {}, errorCallback: () => {} }).catch(() => {});
  }
  if (/\bimport\b/.test(m.code)) {
    try {
      await py.loadPackagesFromImports(m.code, { messageCallback: () => {}, errorCallback: (e: string) => loadErrors.push(String(e)) });
    } catch (e) {
      // The import in user code reports the failure; this says why.
      loadErrors.push(String((e as Error)?.message ?? e));
    }
  }
  const driver = driverOf();
  post({ op: "started" }); // the run's time limit starts now
  py.setInterruptBuffer(interrupt);
  // An interrupt that came while packages loaded (or preloads ran) was raised, and
  // swallowed, in that Python: the host's flag still says it came, so the code gets it.
  const pending = () => {
    if (interrupt[1] === 1) interrupt[0] = 2; // SIGINT
  };
  pending();
  for (const n of m.preload ?? []) {
    const e = await quietRun(`import ${n}`, "<preload>");
    if (e) se.write(new TextEncoder().encode(`[sandbox] preload of ${n} failed: ${e}\n`));
  }
  pending();
  try {
    const [s, v, e, so] = await callDriver(m.code, m.filename, m.maxOutput, driver);
    compiled = so ?? [];
    status = s;
    result = v ?? null;
    if (e) error = { type: e[0], message: e[1], traceback: e[2] };
  } catch (e) {
    // The driver answers for every Python exception of the code: one that reaches here
    // is the driver's own failure (the interpreter failed, or code of the session's broke
    // the driver), and the process is done with; unless the host's interrupt landed
    // outside the code, which ends the run as a timeout.
    if (interrupt[1] !== 1) throw e;
    status = "error";
    error = { type: "SandboxError", message: String((e as Error)?.message ?? e), traceback: "" };
  } finally {
    py.setInterruptBuffer(idleInterrupt);
  }
  if (error?.type === "ModuleNotFoundError" && loadErrors.length) {
    // The load's own errors name server paths and hosts: they go to the process's log.
    // What the user reads comes from the engine, through the import that failed
    // (driver.py, DistributionFinder).
    console.error(`package load failed: ${loadErrors.join("; ").slice(0, 2000)}`);
  }
  lap("python");
  so.flush();
  se.flush();
  const interrupted = interrupt[1] === 1;
  interrupt[0] = 0;
  interrupt[1] = 0;
  if (interrupted && status !== "success") {
    // The interrupt can land in the event loop rather than in user code; either way the
    // run ended because the host asked it to.
    status = "timeout";
    if (!error || error.type !== "KeyboardInterrupt") error = { type: "KeyboardInterrupt", message: "", traceback: error?.traceback ?? "" };
  }
  sinks.stdout = sinks.stderr = discard;
  displays.active = false;

  const after = new Map<string, string>();
  walk(WORKDIR, after);
  lap("files");
  files = after;
  const changed: { path: string; size: number; data: Uint8Array | null }[] = [];
  let omitted = 0;
  for (const [p, sig] of after) {
    const [mtime, size] = sig.split(":").map(Number);
    if (before.get(p) === sig && mtime < startMs) continue;
    // Files over the size limit are named but not sent, files past the count limit only
    // counted: the engine reports both as not returned.
    if (changed.length >= m.maxFiles) {
      omitted++;
      continue;
    }
    changed.push({ path: p.slice(WORKDIR.length + 1), size, data: size <= m.maxFileBytes ? py.FS.readFile(p) : null });
  }
  const deleted = [...before.keys()].filter((p) => !after.has(p)).map((p) => p.slice(WORKDIR.length + 1));
  // Files written to /tmp live in this process only: the engine names them as not kept.
  const scratch = new Map<string, string>();
  try { walk("/tmp", scratch); } catch { /* no /tmp */ }
  const outside = [...scratch].filter(([p, sig]) => tmpBefore.get(p) !== sig).map(([p]) => p).slice(0, 20);
  const packages = Object.keys(py.loadedPackages ?? {});
  const reply: any = {
    op: "done", run: runId, status, result, error,
    stdout: out.text, stderr: err.text, stdoutTruncated: out.truncated, stderrTruncated: err.truncated,
    changed, omitted, deleted, outside, packages, timings, displaysDropped: displays.dropped,
  };
  compiledLoaded = compiled;
  post(reply);
}

// compiledLoaded is what the last run reported of compiled extension modules: they stay
// loaded, so it only grows.
let compiledLoaded: string[] = [];

// heapState is the session's heap as a delta against the base, or why it cannot be one.
// The engine asks for it between runs (checkpoint), off the runs' path.
async function heapState(maxBytes = Infinity): Promise<{ header?: Uint8Array; delta?: Uint8Array; snapshotError?: string; tooLarge?: boolean }> {
  if (compiledLoaded.length) {
    // Pyodide cannot restore a heap that loaded compiled extensions: the session
    // persists as packages plus replay of its successful cells.
    return { snapshotError: `compiled extension modules loaded: ${compiledLoaded.slice(0, 5).join(", ")}` };
  }
  for (let attempt = 0; ; attempt++) {
    // After top-level await, the driver's coroutine hands its last JS references back a
    // few ticks later: wait for them only when the first try fails.
    if (attempt > 0) await macrotask();
    try {
      return liveDelta(maxBytes);
    } catch (e) {
      // Still failing: user code holds JS objects, which a snapshot cannot carry.
      if (e instanceof DeltaTooLarge) return { snapshotError: e.message, tooLarge: true };
      if (attempt >= 3) return { snapshotError: String((e as Error)?.message ?? e) };
    }
  }
}


type Driver = { mod: any; run: any; runAsync: any };

// driverOf finds the driver's entry points. The session's own code can reach the
// driver's module and break it: a run then fails here, before its code starts, and the
// engine brings the session back from its saved state (or resets it, when that state
// holds the breakage).
function driverOf(): Driver {
  const mod = py.pyimport("_sandchat");
  const run = mod.run, runAsync = mod.run_async;
  if (typeof run !== "function" || typeof runAsync !== "function") {
    for (const x of [run, runAsync, mod]) {
      try {
        x?.destroy?.();
      } catch { /* not a proxy */ }
    }
    throw new Error("code of the session replaced the sandbox's cell runner (module _sandchat), so no cell can run");
  }
  return { mod, run, runAsync };
}

// callDriver runs code through the driver and returns [status, repr, error].
async function callDriver(code: string, filename: string, limit: number, d: Driver = driverOf()): Promise<any[]> {
  try {
    // Called so that it may suspend (JSPI): an import the driver's finder resolves
    // through the engine waits for the answer inside otherwise synchronous code.
    let r = typeof d.run.callPromising === "function" ? await d.run.callPromising(code, filename, limit) : d.run(code, filename, limit);
    if (r === undefined || r === null) r = await d.runAsync(limit);
    const v = r.toJs();
    r.destroy();
    return v;
  } finally {
    d.run.destroy();
    d.runAsync.destroy();
    d.mod.destroy();
  }
}

async function quietRun(code: string, filename: string) {
  const [s, , e] = await callDriver(code, filename, 100);
  return s === "success" ? null : `${e?.[0]}: ${e?.[1]}`;
}

// A KeyboardInterrupt raised inside Pyodide's event loop surfaces as an unhandled
// rejection; left alone it would take the whole Worker down.
self.addEventListener("unhandledrejection", (e: PromiseRejectionEvent) => e.preventDefault());
// Likewise an exception thrown later by JS that user code scheduled (a timer, say): it is
// the user's bug, not a reason to lose the session.
self.addEventListener("error", (e: ErrorEvent) => e.preventDefault());

self.onmessage = async ({ data: m }: MessageEvent) => {
  try {
    switch (m.op) {
      case "boot": {
        // A fresh interpreter whose heap becomes the base every session is diffed against.
        py = await load(m);
        if (typeof m.driver !== "string" || !m.driver) throw new Error("boot without the driver");
        py.runPython(m.driver, { filename: "<sandchat>" });
        forgetProvided();
        // /data is importable from the base on, so a fresh session's first run need not
        // touch the import system (see mountData).
        py.runPython(`__import__("sys").path.append("/data")`, { filename: "<sandchat>" });
        if (m.preload?.length) {
          // Imported before the snapshot: every session starts with them, at no cost to
          // its state.
          const code = m.preload.map((n: string) => `import ${n}`).join("\n");
          const errors: string[] = [];
          await py.loadPackagesFromImports(code, { messageCallback: () => {}, errorCallback: (e: string) => errors.push(String(e)) });
          try {
            py.runPython(code, { filename: "<preload>" });
          } catch (e) {
            throw new Error(`preload failed: ${String((e as Error)?.message ?? e).slice(-300)} ${errors.join("; ").slice(0, 300)}`);
          }
          const so = py.runPython("', '.join(__import__('_sandchat').compiled()[:5])");
          if (so) throw new Error(`preloaded modules load compiled extension modules (${so}), which a base snapshot cannot hold`);
        }
        // Pyodide checks that the record of loaded packages is still empty when it takes
        // a snapshot; a restored interpreter starts with an empty one anyway (it loads
        // the preloaded packages' files again on their first import, from the cache).
        const loaded = py.loadedPackages ?? {};
        const record = { ...loaded };
        for (const k of Object.keys(record)) delete loaded[k];
        let snap: any;
        try {
          snap = py.makeMemorySnapshot();
        } finally {
          Object.assign(loaded, record);
        }
        post({ op: "booted", version: py.version, snapshot: snap }, [snap.buffer]);
        return;
      }
      case "prime": {
        // A spare Worker: loaded and ready to restore a session without paying for
        // starting a Worker and importing Pyodide.
        await prime(m);
        if (typeof m.basePath === "string" && m.basePath) {
          prepared = readBase(m.basePath);
          // A warm-up Worker never saves a heap: only the session's Worker needs the
          // base's block hashes.
          if (!m.warmup) indexBase(prepared);
        }
        post({ op: "primed" });
        return;
      }
      case "init": {
        memoryCap = m.memory;
        interrupt = new Uint8Array(m.interrupt);
        const t0 = performance.now();
        const base = prepared;
        if (!base) throw new Error("no base snapshot to load");
        prepared = null;
        const snapshot = restoreFrom(base, m.header, m.delta);
        heapRestored = !!m.delta;
        const t1 = performance.now();
        let unread = true;
        try {
          py = await load(m, snapshot);
          unread = pendingHeap !== null;
        } finally {
          pendingHeap = null;
          // The heap is in wasm memory now: the file is done with.
          base.file.close();
        }
        if (unread) throw new Error("Pyodide loaded without asking for the heap: its snapshot layout changed");
        initTimings = { prepare: t1 - t0, load: performance.now() - t1, sharedWasm: m.wasm && !wasmModule ? 1 : 0 };
        // Interrupts reach user code only (run, below): one that lands while the
        // driver syncs /data or the working directory would break that sync instead.
        py.setInterruptBuffer(idleInterrupt);
        py.setStdout({ write: (b: Uint8Array) => sinks.stdout(b) });
        py.setStderr({ write: (b: Uint8Array) => sinks.stderr(b) });
        // No interactive stdin: reads see end of file (input() raises a clear EOFError).
        py.setStdin({ stdin: () => null });
        harden();
        if (m.warm) {
          // A pool Worker waits for a new session: pay now for what its first run would
          // (the RNG seed, first passes through the driver and the heap diff), not then.
          await quietRun("__import__(\"_sandchat\").reseed()", "<sandchat>");
          reseeded = true;
          await quietRun("None", "<warmup>");
          // The heap diff is JavaScript, compiled per isolate: warming it up helps only
          // the Worker that will save the session's heap, not a warm-up Worker.
          if (!m.warmup) {
            try {
              liveDelta();
            } catch { /* only warming up */ }
          }
        }
        post({ op: "ready", timings: initTimings });
        return;
      }
      case "attach": {
        // The session becomes live: a pool worker gets its own RNG and its saved files.
        if (m.reseed && !reseeded) await quietRun("__import__(\"_sandchat\").reseed()", "<sandchat>");
        rmTree(WORKDIR);
        for (const f of m.files ?? []) writeFile(WORKDIR + "/" + f.path, f.data);
        let failed: string | null = null;
        pipInstalled = [];
        try {
          await installWheels([], m.pip ?? []);
        } catch (e) {
          failed = `packages installed with micropip: ${String((e as Error)?.message ?? e).slice(0, 300)}`;
        }
        if (m.packages?.length) {
          try {
            await py.loadPackage(m.packages, { messageCallback: () => {}, errorCallback: () => {} });
          } catch (e) {
            failed = String(e);
          }
        }
        if (m.cells?.length) {
          // Cells replay against /data as it is now: one may import or read an upload.
          await mountData(m.data ?? []);
        }
        for (const [i, cell] of (m.cells ?? []).entries()) {
          if (failed) break;
          await py.loadPackagesFromImports(cell, { messageCallback: () => {}, errorCallback: () => {} }).catch(() => {});
          post({ op: "replaying", index: i }); // its time limit starts now
          py.setInterruptBuffer(interrupt); // the cell's own time limit may interrupt it
          let e;
          try {
            e = await quietRun(cell, `<replay-${i + 1}>`);
          } finally {
            py.setInterruptBuffer(idleInterrupt);
          }
          if (e) failed = `replay of cell ${i + 1} failed: ${e}`;
        }
        if (m.cells?.length) {
          // Replay may have rewritten files: the saved ones are the truth.
          for (const f of m.files ?? []) writeFile(WORKDIR + "/" + f.path, f.data);
        }
        files = new Map();
        walk(WORKDIR, files);
        post({ op: "attached", error: failed });
        return;
      }
      case "run":
        await run(m);
        return;
      case "ping": // the run's "done" came from here, not from code still running
        post({ op: "pong" });
        return;
      case "checkpoint":
        post({ op: "checkpointed", ...(await heapState(typeof m.maxBytes === "number" ? m.maxBytes : Infinity)) });
        return;
      case "pipDone": {
        const resolve = pipWaiting.get(m.seq);
        pipWaiting.delete(m.seq);
        resolve?.(m);
        return;
      }
    }
  } catch (e) {
    // The stack names server paths: it goes to the process's log; the session is told
    // what failed in one line (never "[object Object]").
    console.error(`worker op ${String(m?.op).slice(0, 40)} failed: ${String((e as Error)?.stack ?? describe(e)).slice(0, 4000)}`);
    post({ op: "failed", error: describe(e) });
  }
};
