// The session's working directory, /home/pyodide: its saved files put back when the
// session becomes live, and what each run created, changed or deleted there, which the
// engine keeps as the session's files and returns as artifacts.

import type { ChangedFile, RunLimits } from "../messages.ts";
import type { FileBlob } from "../protocol.ts";
import { rmTree, walk, writeFile } from "./fs.ts";
import { py } from "./pyodide.ts";

const WORKDIR = "/home/pyodide";

// path → "mtime:size" of the working directory after the last run (or attach).
let files = new Map<string, string>();

/** resetFiles makes the working directory hold the session's saved files alone. */
export function resetFiles(saved: FileBlob[]) {
  rmTree(WORKDIR);
  putFiles(saved);
}

/** putFiles writes the session's saved files over those of the working directory. */
export function putFiles(saved: FileBlob[]) {
  for (const f of saved) writeFile(WORKDIR + "/" + f.path, f.data);
}

/** listFiles takes the working directory as it is now as the one the next run changes. */
export function listFiles() {
  files = new Map();
  walk(WORKDIR, files);
}

export type Changes = { changed: ChangedFile[]; omitted: number; deleted: string[]; outside: string[] };

/** A run's watch on the files, from its start: what it finds at the run's end that was
 * not there before. */
export class FileWatch {
  #before = files;
  #startMs = Date.now();
  #tmpBefore = scratch();

  /** changes lists what the run did to the files, within its limits, and takes the
   * working directory as it is now for the next run. */
  changes(limits: Pick<RunLimits, "maxFiles" | "maxFileBytes">): Changes {
    const before = this.#before;
    const after = new Map<string, string>();
    walk(WORKDIR, after);
    files = after;
    const changed: ChangedFile[] = [];
    let omitted = 0;
    for (const [p, sig] of after) {
      const [mtime, size] = sig.split(":").map(Number);
      if (before.get(p) === sig && mtime < this.#startMs) continue;
      // Files over the size limit are named but not sent, files past the count limit
      // only counted: the engine reports both as not returned.
      if (changed.length >= limits.maxFiles) {
        omitted++;
        continue;
      }
      changed.push({ path: p.slice(WORKDIR.length + 1), size, data: size <= limits.maxFileBytes ? py.FS.readFile(p) : null });
    }
    const deleted = [...before.keys()].filter((p) => !after.has(p)).map((p) => p.slice(WORKDIR.length + 1));
    // Files written to /tmp live in this process only: the engine names them as not kept.
    const outside = [...scratch()].filter(([p, sig]) => this.#tmpBefore.get(p) !== sig).map(([p]) => p).slice(0, 20);
    return { changed, omitted, deleted, outside };
  }
}

function scratch(): Map<string, string> {
  const m = new Map<string, string>();
  try {
    walk("/tmp", m);
  } catch { /* no /tmp */ }
  return m;
}
