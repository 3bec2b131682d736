// A fresh interpreter whose heap becomes the base every session is restored from and
// diffed against: the driver installed (its sources are runtime/display.py and
// driver.py, handed over by the control thread), /data importable, the preloaded modules imported, then the
// snapshot. The driver lives in its own module (_sandchat) so that user globals stay
// clean, and is installed before the snapshot, so every restored session has it.

import type { ToWorker } from "../messages.ts";
import { post } from "./post.ts";
import { forgetProvided, loadPyodide } from "./pyodide.ts";

export async function boot(m: Extract<ToWorker, { op: "boot" }>) {
  const py = await loadPyodide(m);
  if (!Array.isArray(m.driver) || !m.driver.length) throw new Error("boot without the driver");
  for (const source of m.driver) py.runPython(source, { filename: "<sandchat>" });
  forgetProvided();
  // /data is importable from the base on, so a fresh session's first run need not
  // touch the import system (see data.ts).
  py.runPython(`__import__("sys").path.append("/data")`, { filename: "<sandchat>" });
  if (m.preload?.length) {
    // Imported before the snapshot: every session starts with them, at no cost to its
    // state.
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
  // Pyodide checks that the record of loaded packages is still empty when it takes a
  // snapshot; a restored interpreter starts with an empty one anyway (it loads the
  // preloaded packages' files again on their first import, from the cache).
  const loaded = py.loadedPackages ?? {};
  const record = { ...loaded };
  for (const k of Object.keys(record)) delete loaded[k];
  let snap: Uint8Array;
  try {
    snap = py.makeMemorySnapshot();
  } finally {
    Object.assign(loaded, record);
  }
  post({ op: "booted", version: py.version, snapshot: snap }, [snap.buffer as ArrayBuffer]);
}
