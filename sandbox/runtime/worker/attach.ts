// The session becomes live in a loaded interpreter: its own random seed, its saved files
// and packages, then the replay of its cells when its heap could not be saved.

import type { ToWorker } from "../messages.ts";
import { dataHeapIsSessions, mountData } from "./data.ts";
import { quietRun, reseed } from "./driver.ts";
import { ignoreInterrupts, watchInterrupts } from "./interrupt.ts";
import { reinstall } from "./pip.ts";
import { post } from "./post.ts";
import { py } from "./pyodide.ts";
import { goBack, listFiles, putFiles, resetFiles, type SavedTree } from "./workdir.ts";

const quiet = { messageCallback: () => {}, errorCallback: () => {} };

/** attach answers why the session could not be brought back whole, or null. */
export async function attach(m: Extract<ToWorker, { op: "attach" }>): Promise<string | null> {
  // A pool worker gets its own RNG and its saved files.
  if (m.reseed) await reseed();
  const saved: SavedTree = { files: m.files ?? [], dirs: m.dirs ?? [], links: m.links ?? [], cwd: m.cwd ?? "" };
  const cells = m.cells ?? [];
  // Cells replayed on a session's heap (those run since it was saved) find the files as
  // they are now (the nearest there is to those of that heap); cells replayed from the
  // start find the working directory empty, as the first of them did: a cell's
  // os.mkdir("out") would fail on the out/ its later cells filled.
  const fromStart = cells.length > 0 && !dataHeapIsSessions();
  resetFiles(fromStart ? { files: [], dirs: [], links: [], cwd: "" } : saved);
  let failed: string | null = null;
  try {
    await reinstall(m.pip ?? []);
  } catch (e) {
    failed = `packages installed with micropip: ${String((e as Error)?.message ?? e).slice(0, 300)}`;
  }
  if (m.packages?.length) {
    try {
      await py.loadPackage(m.packages, quiet);
    } catch (e) {
      failed = String(e);
    }
  }
  if (cells.length) {
    // Cells replay against /data as it is now: one may import or read an upload.
    await mountData(m.data ?? []);
  }
  for (const [i, cell] of cells.entries()) {
    if (failed) break;
    await py.loadPackagesFromImports(cell, quiet).catch(() => {});
    post({ op: "replaying", index: i }); // its time limit starts now
    watchInterrupts(); // the cell's own time limit may interrupt it
    let e;
    try {
      e = await quietRun(cell, `<replay-${i + 1}>`);
    } finally {
      ignoreInterrupts();
    }
    if (e) failed = `replay of cell ${i + 1} failed: ${e}`;
  }
  if (cells.length) {
    // Replay may have rewritten files: the saved ones are the truth.
    putFiles(saved);
  }
  goBack(saved);
  listFiles();
  return failed;
}
