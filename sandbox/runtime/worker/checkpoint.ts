// The session's heap between runs, as the blocks that differ from the base's (base.ts),
// for the engine to save off the runs' path. The blocks travel as they are; the engine
// XORs them with the base's before storing them (sandbox/heapstream.go).

import type { HeapState } from "../messages.ts";
import { baseHeader, baseHeapLength, blockChanged, hashedBlocks, HEADER_FIXED, PAGE } from "./base.ts";
import { py } from "./pyodide.ts";

// What the last run reported of compiled extension modules: they stay loaded, so it
// only grows.
let compiledLoaded: string[] = [];

/** noteCompiled records the compiled extension modules a run reported loaded. */
export function noteCompiled(modules: string[]) {
  compiledLoaded = modules;
}

// DeltaTooLarge is a heap whose delta would pass the session's state limit: it is not
// built at all, so a checkpoint never needs memory the session was not granted.
class DeltaTooLarge extends Error {}

/** heapState is the session's heap as a delta against the base, or why it cannot be one. */
export async function heapState(maxBytes = Infinity): Promise<HeapState> {
  if (compiledLoaded.length) {
    // Pyodide cannot restore a heap that loaded compiled extensions: the session
    // persists as packages plus replay of its successful cells.
    return { snapshotError: `compiled extension modules loaded: ${compiledLoaded.slice(0, 5).join(", ")}` };
  }
  for (let attempt = 0;; attempt++) {
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

/** liveDelta builds the snapshot's header itself and diffs the live heap in place,
 * which skips copying ~30 MB per checkpoint. */
export function liveDelta(maxBytes = Infinity): { header: Uint8Array; delta: Uint8Array } {
  const fixed = baseHeader();
  if (fixed[HEADER_FIXED] !== 0x7b /* { */ && fixed[HEADER_FIXED] !== 0x5b /* [ */) {
    return diff(py.makeMemorySnapshot()); // a layout we do not know: take the slow path
  }
  const json = JSON.stringify(py._api.serializeHiwireState(undefined));
  const n = Math.ceil((HEADER_FIXED + 2 * json.length) / 16) * 16;
  const header = new Uint8Array(n);
  header.set(fixed.subarray(0, HEADER_FIXED));
  const { written } = new TextEncoder().encodeInto(json, header.subarray(HEADER_FIXED));
  const u = new Uint32Array(header.buffer);
  u[1] = n;
  u[2] = written;
  u[3] = 0;
  const h8 = py._module.HEAP8;
  return { header, delta: diffHeap(new Uint8Array(h8.buffer, h8.byteOffset, h8.length), maxBytes) };
}

// diff splits a whole snapshot into its header and its heap's delta.
function diff(snap: Uint8Array): { header: Uint8Array; delta: Uint8Array } {
  const ho = new DataView(snap.buffer, snap.byteOffset, snap.byteLength).getUint32(4, true);
  return { header: snap.slice(0, ho), delta: diffHeap(snap.subarray(ho)) };
}

// diffHeap lays out the blocks of heap that differ from the base's: u32 heap length,
// u32 block count, u32 block size, u32 block indexes, then the blocks (restore.ts,
// fillHeap, reads it; sandbox/heapstream.go XORs it).
function diffHeap(heap: Uint8Array, maxBytes = Infinity): Uint8Array {
  const n = Math.ceil(heap.length / PAGE);
  const hashed = hashedBlocks(), baseLen = baseHeapLength();
  const changed: number[] = [];
  const aligned = (heap.byteOffset & 3) === 0 && heap.length % PAGE === 0;
  const h32 = new Int32Array(heap.buffer, heap.byteOffset, aligned ? heap.length >> 2 : 0);
  for (let p = 0; p < n; p++) {
    if (!aligned || (p >= hashed && p * PAGE < baseLen)) {
      changed.push(p);
    } else if (p < hashed) {
      if (blockChanged(h32, p)) changed.push(p);
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
