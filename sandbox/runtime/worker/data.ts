// /data: the conversation's uploads, read-only to Python and importable. The engine
// sends only the files a process does not hold yet; what it holds is tracked here.

import type { DataFile } from "../protocol.ts";
import { asOwner, pruneDirs, rmTree, setDirModes, walk, writeFile } from "./fs.ts";
import { py } from "./pyodide.ts";

const DATADIR = "/data";

// SHA-256 (or the engine's version) of each file under /data as last mounted; null when
// unknown (a new process or a restored heap), so every module imported from /data
// counts as changed.
let dataHashes: Map<string, string> | null = null;
// The interpreter is a session's saved heap, which may hold modules imported from /data;
// one from the base holds none.
let heapRestored = false;

/** dataHeapRestored says whether the interpreter was loaded from a session's heap. */
export function dataHeapRestored(restored: boolean) {
  heapRestored = restored;
}

/** dataHeapIsSessions tells whether the interpreter was loaded from a session's heap. */
export const dataHeapIsSessions = (): boolean => heapRestored;

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

// openData makes /data writable for a change, creating it if need be.
function openData() {
  try {
    setDirModes(DATADIR, 0o755);
  } catch {
    py.FS.mkdir(DATADIR);
  }
}

// putData writes files into /data, read-only, and closes /data again.
function putData(data: DataFile[]) {
  for (const f of data) {
    writeFile(DATADIR + "/" + f.name, f.data);
    py.FS.chmod(DATADIR + "/" + f.name, 0o444);
  }
  setDirModes(DATADIR, 0o555);
}

/** mountData makes /data hold exactly data (the replay of an attach). */
export async function mountData(data: DataFile[]) {
  asOwner(() => {
    openData();
    rmTree(DATADIR);
    putData(data);
  });
  const hashes = new Map<string, string>();
  for (const f of data) {
    const h = new Uint8Array(await crypto.subtle.digest("SHA-256", f.data as Uint8Array<ArrayBuffer>));
    hashes.set(f.name, Array.from(h, (b) => b.toString(16).padStart(2, "0")).join(""));
  }
  resync(hashes);
}

/** syncData brings /data to the engine's listing (name → version) sending only the
 * files that are new or changed; the others are here already, as the last sync left
 * them. A run whose uploads did not change costs no copy, no hash and no file system
 * work. */
export function syncData(data: DataFile[], versions: Record<string, string>) {
  const want = new Map(Object.entries(versions));
  const same = dataHashes !== null && want.size === dataHashes.size && [...want].every(([n, v]) => dataHashes!.get(n) === v);
  if (data.length === 0 && (same || (dataHashes === null && want.size === 0 && !heapRestored))) return;
  asOwner(() => {
    openData();
    const incoming = new Set(data.map((f) => f.name));
    const held = new Map<string, string>();
    walk(DATADIR, held);
    for (const p of held.keys()) {
      const name = p.slice(DATADIR.length + 1);
      if (!want.has(name) || incoming.has(name)) py.FS.unlink(p);
    }
    pruneDirs(DATADIR);
    putData(data);
  });
  resync(want);
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
