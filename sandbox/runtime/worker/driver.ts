// The driver's entry points: every cell, replayed cell and preload runs through the
// module _sandchat (driver.py), which answers for every Python exception of the code.

import { type Pyodide, py } from "./pyodide.ts";

type Driver = { mod: Pyodide; run: Pyodide; runAsync: Pyodide };

/** What the driver says of a cell: its status, the repr of its value, its exception
 * (type, message, traceback), and the compiled extension modules loaded. */
export type CellResult = [
  status: "success" | "error",
  repr: string | null | undefined,
  error: [type: string, message: string, traceback: string] | null | undefined,
  compiled: string[] | undefined,
];

/** driverOf finds the driver's entry points. The session's own code can reach the
 * driver's module and break it: a run then fails here, before its code starts, and the
 * engine brings the session back from its saved state (or resets it, when that state
 * holds the breakage). */
export function driverOf(): Driver {
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

/** callDriver runs code through the driver; its output's repr is cut to limit. */
export async function callDriver(code: string, filename: string, limit: number, d: Driver = driverOf()): Promise<CellResult> {
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

/** quietRun runs code through the driver for its effect: null, or why it failed. */
export async function quietRun(code: string, filename: string): Promise<string | null> {
  const [s, , e] = await callDriver(code, filename, 100);
  return s === "success" ? null : `${e?.[0]}: ${e?.[1]}`;
}

let reseeded = false;

/** reseed gives the interpreter its own random seed, once: a snapshot freezes the RNG,
 * and two sessions restored from one base would draw the same numbers. */
export async function reseed() {
  if (reseeded) return;
  await quietRun('__import__("_sandchat").reseed()', "<sandchat>");
  reseeded = true;
}
