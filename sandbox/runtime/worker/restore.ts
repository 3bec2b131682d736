// A restore writes the heap into wasm memory itself, a page at a time, instead of
// letting Pyodide copy a whole snapshot in: half of the base heap is pages of zeros (the
// C stack's unused depth, the free top of the heap), which the engine does not even send,
// and a fresh wasm memory is zero already, so those pages are never touched. Untouched,
// they cost neither a page fault (~2-35 us each on the development VM) nor resident
// memory for as long as the session lives. The session's blocks (checkpoint.ts) go
// straight into memory after the base's pages.

import { OS_PAGE, type PackedBase, readAt } from "./base.ts";
import type { MemoryControl } from "./memory.ts";

type Grow = MemoryControl["growPastLimit"];
type HeapRestore = { base: PackedBase; heapLen: number; delta?: Uint8Array; grow: Grow; memory?: WebAssembly.Memory };
// The heap the next load restores, until HeaderSnapshot writes it.
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

/** restoreFrom prepares the next load: the header Pyodide reads, and the heap it restores
 * (the base's, with the session's blocks when there is a delta); grow makes room for a
 * heap larger than the module's initial memory. */
export function restoreFrom(base: PackedBase, header: Uint8Array | undefined, delta: Uint8Array | undefined, grow: Grow): Uint8Array {
  const h = delta && header ? header : base.header;
  const heapLen = delta ? new DataView(delta.buffer, delta.byteOffset, delta.byteLength).getUint32(0, true) : base.heapLen;
  const snap = new HeaderSnapshot(h.length);
  snap.set(h);
  new DataView(snap.buffer).setUint32(4, h.length, true);
  pendingHeap = { base, heapLen, delta, grow };
  return snap;
}

/** restoreInstantiated is told of the memory of the first instance with one after
 * restoreFrom (worker/wasm.ts): a session whose heap grew past the module's initial
 * memory needs it grown to fit before Pyodide copies the heap in. */
export function restoreInstantiated(memory: WebAssembly.Memory) {
  const r = pendingHeap;
  if (!r || r.memory) return;
  const pages = Math.ceil((r.heapLen - memory.buffer.byteLength) / 65536);
  if (pages > 0) r.grow(memory, pages);
  r.memory = memory;
}

/** restoreDone ends the restore, and says whether Pyodide never asked for the heap. */
export function restoreDone(): boolean {
  const unread = pendingHeap !== null;
  pendingHeap = null;
  return unread;
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
