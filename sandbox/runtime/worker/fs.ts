// Helpers on the interpreter's file system (Emscripten's FS), shared by the working
// directory (workdir.ts) and /data (data.ts). Python shapes these trees as it likes
// (modes, links, a file where a folder was): the engine's own reads and writes go
// through whatever it left (asOwner, makeRoom), and walk without recursing.

import { py } from "./pyodide.ts";

/** An entry of a tree: a regular file (its mtime and size), a directory or a symbolic
 * link (its target). Other kinds (devices) are not kept, so not listed. */
export type Entry = { kind: "file"; mtime: number; size: number } | { kind: "dir" } | { kind: "link"; target: string };

/** asOwner runs fn with the file system's permission checks off: what Python chmod-ed
 * (a file of mode 0, a folder without write or search) is the engine's to read, save,
 * restore and clear all the same. */
export function asOwner<T>(fn: () => T): T {
  const FS = py.FS;
  const was = FS.ignorePermissions;
  FS.ignorePermissions = true;
  try {
    return fn();
  } finally {
    FS.ignorePermissions = was;
  }
}

// entryOf is what is at p, not following a link; null when nothing is.
function entryOf(p: string): Entry | null {
  const FS = py.FS;
  let st;
  try {
    st = FS.lstat(p);
  } catch {
    return null;
  }
  if (FS.isDir(st.mode)) return { kind: "dir" };
  if (FS.isLink(st.mode)) return { kind: "link", target: FS.readlink(p) };
  if (FS.isFile(st.mode)) return { kind: "file", mtime: new Date(st.mtime).getTime(), size: st.size };
  return null;
}

/** walkTree lists the entries under dir, by path (dir itself not included); none when
 * dir is not a directory. A link is listed, never followed: a dangling one cannot break
 * the walk, nor one pull a file from outside into the results. */
export function walkTree(dir: string): Map<string, Entry> {
  const FS = py.FS;
  const out = new Map<string, Entry>();
  if (entryOf(dir)?.kind !== "dir") return out;
  const todo = [dir];
  for (let d = todo.pop(); d !== undefined; d = todo.pop()) {
    for (const name of FS.readdir(d)) {
      if (name === "." || name === "..") continue;
      const p = d + "/" + name;
      const e = entryOf(p);
      if (!e) continue;
      out.set(p, e);
      if (e.kind === "dir") todo.push(p);
    }
  }
  return out;
}

/** walk lists the regular files under dir into out: path → "mtime:size". */
export function walk(dir: string, out: Map<string, string>) {
  for (const [p, e] of walkTree(dir)) {
    if (e.kind === "file") out.set(p, `${e.mtime}:${e.size}`);
  }
}

/** rmTree empties dir. */
export function rmTree(dir: string) {
  if (entryOf(dir)?.kind !== "dir") return;
  const FS = py.FS;
  // Deepest first: a directory is empty when its turn comes.
  const dirs: string[] = [];
  for (const [p, e] of walkTree(dir)) {
    if (e.kind === "dir") dirs.push(p);
    else FS.unlink(p);
  }
  dirs.sort((a, b) => b.length - a.length);
  for (const d of dirs) FS.rmdir(d);
}

// remove takes away what is at p, whatever it is.
function remove(p: string) {
  const e = entryOf(p);
  if (e?.kind === "dir") {
    rmTree(p);
    py.FS.rmdir(p);
  } else if (e) py.FS.unlink(p);
}

/** makeRoom makes p's parents directories, and clears p for an entry of kind: what
 * stands in the way (a file or link where a parent directory goes, a directory where a
 * file goes) is removed. It answers whether p holds a directory already. */
export function makeRoom(p: string, kind: Entry["kind"]): boolean {
  const FS = py.FS;
  const parts = p.split("/").filter(Boolean);
  let d = "";
  for (const part of parts.slice(0, -1)) {
    d += "/" + part;
    const e = entryOf(d);
    if (e?.kind === "dir") continue;
    if (e) FS.unlink(d);
    FS.mkdir(d);
  }
  const here = entryOf(p);
  if (here?.kind === "dir" && kind === "dir") return true;
  if (here) remove(p);
  return false;
}

/** writeFile writes a file, making the directories above it. */
export function writeFile(path: string, data: Uint8Array) {
  makeRoom(path, "file");
  py.FS.writeFile(path, data);
}

/** setDirModes sets the mode of dir and of every directory under it. */
export function setDirModes(dir: string, mode: number) {
  const FS = py.FS;
  FS.chmod(dir, mode);
  for (const [p, e] of walkTree(dir)) {
    if (e.kind === "dir") FS.chmod(p, mode);
  }
}

/** pruneDirs removes the directories under dir that hold no file, as far as it can: a
 * directory the interpreter will not remove (its realm's Object.prototype was given an
 * enumerable property, which Emscripten's rmdir reads as an entry) stays, empty. */
export function pruneDirs(dir: string) {
  const FS = py.FS;
  const dirs: string[] = [];
  for (const [p, e] of walkTree(dir)) {
    if (e.kind === "dir") dirs.push(p);
  }
  dirs.sort((a, b) => b.length - a.length);
  for (const d of dirs) {
    if (FS.readdir(d).length > 2) continue;
    try {
      FS.rmdir(d);
    } catch { /* kept, empty */ }
  }
}
