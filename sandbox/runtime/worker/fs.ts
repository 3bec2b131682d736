// Helpers on the interpreter's file system (Emscripten's FS), shared by the working
// directory (workdir.ts) and /data (data.ts).

import { py } from "./pyodide.ts";

/** walk lists the files under dir into out: path → "mtime:size". */
export function walk(dir: string, out: Map<string, string>) {
  const FS = py.FS;
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    // lstat: a symlink (dangling or not) is not followed, so it can neither break the
    // walk nor pull a file from outside the working directory into the results.
    const st = FS.lstat(p);
    if (FS.isDir(st.mode)) walk(p, out);
    else if (FS.isFile(st.mode)) out.set(p, `${new Date(st.mtime).getTime()}:${st.size}`);
  }
}

/** writeFile writes a file, making the directories above it. */
export function writeFile(path: string, data: Uint8Array) {
  const FS = py.FS;
  const parts = path.split("/").filter(Boolean);
  let d = "";
  for (const part of parts.slice(0, -1)) {
    d += "/" + part;
    try {
      FS.mkdir(d);
    } catch { /* exists */ }
  }
  FS.writeFile(path, data);
}

/** rmTree empties dir. */
export function rmTree(dir: string) {
  const FS = py.FS;
  let names: string[];
  try {
    names = FS.readdir(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    if (FS.isDir(FS.lstat(p).mode)) {
      rmTree(p);
      FS.rmdir(p);
    } else FS.unlink(p);
  }
}

/** setDirModes sets the mode of dir and of every directory under it. */
export function setDirModes(dir: string, mode: number) {
  const FS = py.FS;
  FS.chmod(dir, mode);
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    if (FS.isDir(FS.lstat(dir + "/" + name).mode)) setDirModes(dir + "/" + name, mode);
  }
}

/** pruneDirs removes the directories under dir that hold no file, as far as it can: a
 * directory the interpreter will not remove (its realm's Object.prototype was given an
 * enumerable property, which Emscripten's rmdir reads as an entry) stays, empty. */
export function pruneDirs(dir: string): boolean {
  const FS = py.FS;
  let empty = true;
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const p = dir + "/" + name;
    if (!FS.isDir(FS.lstat(p).mode) || !pruneDirs(p)) {
      empty = false;
      continue;
    }
    try {
      FS.rmdir(p);
    } catch {
      empty = false; // kept, empty
    }
  }
  return empty;
}
