// The Worker's one interpreter: Pyodide imported, loaded (fresh or from a snapshot), and
// kept as py for the modules that drive it.

import type { PyodideAt } from "../messages.ts";

/** Pyodide's interface: what sandchat uses of it is private (_api, _module, FS), and
 * untyped. */
// deno-lint-ignore no-explicit-any
export type Pyodide = any;

/** The interpreter, once "boot" or "init" has loaded it. */
export let py: Pyodide;
let pyodideModule: Pyodide;

/** importPyodide imports Pyodide's modules, for a load to come. */
export async function importPyodide(pyodideURL: string) {
  pyodideModule ??= await import(pyodideURL + "pyodide.mjs");
  // Pyodide's Emscripten module (1.2 MB of JavaScript): imported here, a spare has it
  // parsed before a restore needs it (the loader imports the same URL).
  await import(pyodideURL + "pyodide.asm.mjs");
}

/** loadPyodide loads the interpreter, from snapshot when one is given. */
export async function loadPyodide(at: PyodideAt, snapshot?: Uint8Array): Promise<Pyodide> {
  await importPyodide(at.pyodideURL);
  const opts: Record<string, unknown> = {
    indexURL: at.pyodideDir,
    _makeSnapshot: true,
    stdout: () => {},
    stderr: () => {},
  };
  if (at.lockFileURL) opts.lockFileURL = at.lockFileURL;
  if (at.packageBaseURL) opts.packageBaseUrl = at.packageBaseURL;
  if (snapshot) opts._loadSnapshot = snapshot;
  const loaded = await pyodideModule.loadPyodide(opts);
  // The snapshot is in wasm memory now: no reference to it may outlive the load.
  delete opts._loadSnapshot;
  if (loaded._api?.config) delete loaded._api.config._loadSnapshot;
  py = loaded;
  forgetProvided();
  return loaded;
}

// forgetProvided keeps Pyodide from loading a package of its distribution for a module
// the driver provides (driver.py, `provided`): sandchat's micropip, the IPython.display
// shim. `from IPython.display import HTML` then loads nothing, as the engine fetches
// nothing for it (pkgs.Provided).
export function forgetProvided() {
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
