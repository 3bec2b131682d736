// The base snapshot, as the engine packs it into a file (sandbox/basepack.go): its
// header, a hash of every block of its heap, then only the heap pages that are not all
// zeros. The pages stay in the file (in the page cache, shared by the node's processes)
// until a restore reads them straight into wasm memory (restore.ts).
//
// What this process keeps of the base once its interpreter is loaded: the fixed part of
// its header and the hashes of its blocks (~1 MB, computed by the engine once per base),
// instead of the base's ~31 MB. The engine keeps the base itself (one copy for all
// sessions) and XORs the blocks a checkpoint sends (checkpoint.ts) against it before it
// stores them.

/** Diff granularity: small blocks keep unchanged bytes out of the delta (a run touches a
 * few hundred scattered words), at 4 bytes of index per changed block. */
export const PAGE = 256;
/** The pages of the packed file: the unit a restore reads or leaves untouched. */
export const OS_PAGE = 4096;
/** Pyodide's snapshot is a header (magic, heap offset, JSON length, 0, 32-byte build id,
 * then the JSON of its JS-side state) followed by a copy of the whole heap. */
export const HEADER_FIXED = 48;
const BASE_HEAD = 32;

export type PackedBase = {
  file: Deno.FsFile;
  header: Uint8Array;
  heapLen: number;
  slot: Int32Array; // per page of the heap: its place among the pages in the file, -1 for zeros
  dataAt: number; // where the pages start in the file, OS_PAGE bytes each
  hashes: Int32Array; // two lanes (hashBlock) per PAGE block of the heap
};

// The base's file, from "prime" until the interpreter is loaded from it (takeBase).
let prepared: PackedBase | null = null;
// What a checkpoint needs of the base (indexBase).
let fixed: Uint8Array = new Uint8Array(0);
let heapLen = 0;
let hashes: Int32Array = new Int32Array(0);

/** readAt fills into from the file at offset at. */
export function readAt(f: Deno.FsFile, at: number, into: Uint8Array) {
  f.seekSync(at, Deno.SeekMode.Start);
  for (let o = 0; o < into.length;) {
    const n = f.readSync(into.subarray(o));
    if (!n) throw new Error("base snapshot: the file ends early");
    o += n;
  }
}

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

/** openBase opens the packed base at path for the load to come. A warm-up Worker never
 * saves a heap: only the session's Worker keeps the base's block hashes (index). */
export function openBase(path: string, index: boolean) {
  prepared = readBase(path);
  if (index) indexBase(prepared);
}

/** takeBase hands the opened base to the load; null when none was opened. */
export function takeBase(): PackedBase | null {
  const b = prepared;
  prepared = null;
  return b;
}

// indexBase keeps what a checkpoint needs of the base: its header's fixed part, and the
// hashes of its blocks.
function indexBase(b: PackedBase) {
  fixed = b.header.slice(0, HEADER_FIXED + 1);
  heapLen = b.heapLen;
  hashes = b.hashes;
}

/** baseHeader is the fixed part of the base's snapshot header, and its first byte of JSON. */
export const baseHeader = (): Uint8Array => fixed;
/** baseHeapLength is the length of the base's heap. */
export const baseHeapLength = (): number => heapLen;
/** hashedBlocks is how many blocks of the base's heap have a hash. */
export const hashedBlocks = (): number => hashes.length >> 1;

/** blockChanged says block p of the heap (w32, aligned) differs from the base's. */
export function blockChanged(w32: Int32Array, p: number): boolean {
  return hashBlock(w32, p * (PAGE >> 2)) !== hashes[2 * p] || hash2 !== hashes[2 * p + 1];
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
