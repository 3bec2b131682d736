// The session's working directory, /home/pyodide: its saved tree put back when the
// session becomes live, and what each run created, changed or deleted there, which the
// engine keeps as the session's files and returns as artifacts. The tree is its regular
// files, its directories (empty ones included) and its symbolic links, and the
// interpreter's current directory with it; modes are not kept.

import type { ChangedFile, RunDone, RunLimits } from "../messages.ts";
import type { FileBlob, Link } from "../protocol.ts";
import { asOwner, type Entry, makeRoom, rmTree, walk, walkTree } from "./fs.ts";
import { py } from "./pyodide.ts";

const WORKDIR = "/home/pyodide";
// Paths the engine keeps: a name of at most MAX_PATH bytes, relative to the working
// directory, that is text (no lone UTF-16 surrogate: Python makes one of a file name's
// bytes that are not UTF-8, and no store could give it back as it was).
const MAX_PATH = 4096;
const enc = new TextEncoder();

// The working directory after the last run (or attach), and the current directory then.
let tree = new Map<string, Entry>();
let cwd = WORKDIR;

/** A session's saved tree, as the engine sends it: paths relative to the working
 * directory; cwd the current directory to go back to, "" for the working directory. */
export type SavedTree = { files: FileBlob[]; dirs: string[]; links: Link[]; cwd: string };

/** resetFiles makes the working directory hold the session's saved tree alone, and
 * the current directory (goBack moves it where the session left it). */
export function resetFiles(saved: SavedTree) {
  asOwner(() => {
    const FS = py.FS;
    FS.chdir("/");
    if (makeRoom(WORKDIR, "dir")) rmTree(WORKDIR);
    else FS.mkdir(WORKDIR);
    putFiles(saved);
    FS.chdir(WORKDIR);
  });
}

/** putFiles lays the session's saved tree over the working directory: directories,
 * then files, then links, each clearing what stands in its way. */
export function putFiles(saved: SavedTree) {
  asOwner(() => {
    const FS = py.FS;
    for (const d of [...saved.dirs].sort()) {
      if (!makeRoom(WORKDIR + "/" + d, "dir")) FS.mkdir(WORKDIR + "/" + d);
    }
    for (const f of saved.files) {
      makeRoom(WORKDIR + "/" + f.path, "file");
      FS.writeFile(WORKDIR + "/" + f.path, f.data);
    }
    for (const l of saved.links) {
      makeRoom(WORKDIR + "/" + l.path, "link");
      FS.symlink(l.target, WORKDIR + "/" + l.path);
    }
  });
}

/** goBack makes the session's current directory the one it saved, when that is still
 * a directory (else the working directory): the last step of bringing a session back,
 * since the cells it replays ran first from a new session's current directory, and
 * their relative paths mean what they meant then. */
export function goBack(saved: SavedTree) {
  asOwner(() => {
    try {
      py.FS.chdir(saved.cwd || WORKDIR);
    } catch {
      py.FS.chdir(WORKDIR);
    }
  });
}

/** listFiles takes the working directory as it is now as the one the next run changes. */
export function listFiles() {
  asOwner(() => {
    tree = walkTree(WORKDIR);
    cwd = py.FS.cwd();
  });
}

/** What a run did to the files, as its "done" reports it. */
export type Changes = Pick<RunDone, "changed" | "omitted" | "dirs" | "links" | "deleted" | "cwd" | "unkept" | "outside">;

// keepable tells a path the engine can keep.
const keepable = (p: string) => p.isWellFormed() && enc.encode(p).length <= MAX_PATH;

function sameEntry(a: Entry, b: Entry): boolean {
  switch (a.kind) {
    case "file":
      return b.kind === "file" && a.mtime === b.mtime && a.size === b.size;
    case "dir":
      return b.kind === "dir";
    case "link":
      return b.kind === "link" && a.target === b.target;
  }
}

/** A run's watch on the files, from its start: what it finds at the run's end that was
 * not there before. */
export class FileWatch {
  #before = tree;
  #startMs = Date.now();
  #tmpBefore = scratch();

  /** changes lists what the run did to the tree, within its limits, and takes the
   * working directory as it is now for the next run. Files past maxFiles are only
   * counted (omitted); directories and links past it, and entries whose path cannot be
   * kept, are counted as not kept (unkept). */
  changes(limits: Pick<RunLimits, "maxFiles" | "maxFileBytes">): Changes {
    return asOwner(() => {
      const before = this.#before;
      const after = walkTree(WORKDIR);
      tree = after;
      const changed: ChangedFile[] = [], dirs: string[] = [], links: Link[] = [];
      let omitted = 0, unkept = 0;
      for (const [p, e] of after) {
        const was = before.get(p);
        if (was && sameEntry(was, e) && !(e.kind === "file" && e.mtime >= this.#startMs)) continue;
        const path = p.slice(WORKDIR.length + 1);
        if (!keepable(path) || (e.kind === "link" && !keepable(e.target))) {
          unkept++;
          continue;
        }
        switch (e.kind) {
          case "file":
            // Files over the size limit are named but not sent, files past the count
            // limit only counted: the engine reports both as not returned.
            if (changed.length >= limits.maxFiles) omitted++;
            else changed.push({ path, size: e.size, data: e.size <= limits.maxFileBytes ? py.FS.readFile(p) : null });
            break;
          case "dir":
            if (dirs.length >= limits.maxFiles) unkept++;
            else dirs.push(path);
            break;
          case "link":
            if (links.length >= limits.maxFiles) unkept++;
            else links.push({ path, target: e.target });
        }
      }
      // Taken away, or replaced by an entry of another kind (which follows as made).
      const deleted = [...before].filter(([p, e]) => after.get(p)?.kind !== e.kind).map(([p]) => p.slice(WORKDIR.length + 1)).filter(keepable);
      const now = py.FS.cwd();
      const moved = now !== cwd && keepable(now) ? now : null;
      cwd = now;
      // Files written to /tmp live in this process only: the engine names them as not kept.
      const outside = [...scratch()].filter(([p, sig]) => this.#tmpBefore.get(p) !== sig).map(([p]) => p).slice(0, 20);
      return { changed, omitted, dirs, links, deleted, cwd: moved, unkept, outside };
    });
  }
}

function scratch(): Map<string, string> {
  const m = new Map<string, string>();
  asOwner(() => walk("/tmp", m));
  return m;
}
