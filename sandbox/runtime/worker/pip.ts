// micropip for the session: installs are asked of the engine (through the control
// thread), which resolves, fetches and verifies them; the Worker installs the wheels
// it is given from the read-only package cache. The driver's micropip (driver.py) and its
// finder of the distribution's modules call the functions set on globalThis here.

import type { ToWorker } from "../messages.ts";
import type { PipWheel } from "../protocol.ts";
import { post } from "./post.ts";
import { py } from "./pyodide.ts";

// The wheels installed in this interpreter, as the session's state records them.
let installed: PipWheel[] = [];
let seq = 0;
const waiting = new Map<number, (r: PipAnswer) => void>();
type PipAnswer = Extract<ToWorker, { op: "pipDone" }>;

const normName = (n: string) => n.toLowerCase().replace(/[-_.]+/g, "-");

function installedNames(): Set<string> {
  const s = new Set(installed.map((w) => normName(w.name)));
  for (const n of Object.keys(py?.loadedPackages ?? {})) s.add(normName(n));
  return s;
}

/** installWheels loads the lock file's packages, then installs the wheels. */
async function installWheels(lock: string[], wheels: PipWheel[]) {
  if (lock?.length) {
    const errors: string[] = [];
    await py.loadPackage(lock, { messageCallback: () => {}, errorCallback: (e: string) => errors.push(String(e)) });
    if (errors.length) throw new Error(errors.join("; ").slice(0, 500));
  }
  for (const w of wheels ?? []) {
    const buf = await Deno.readFile(w.path);
    const file = w.path.slice(w.path.lastIndexOf("/") + 1);
    if (typeof py._api?.install === "function") {
      // Pyodide's own installer: unpacks into site-packages and loads any shared library.
      await py._api.install(buf, file, py._api.sitepackages, new Map([["INSTALLER", "micropip"]]));
    } else {
      py.unpackArchive(buf, "wheel", { extractDir: py._api.sitepackages });
    }
    installed.push({ name: w.name, version: w.version, path: w.path });
  }
}

/** reinstall makes wheels the session's installs again, as its saved state lists them. */
export async function reinstall(wheels: PipWheel[]) {
  installed = [];
  await installWheels([], wheels);
}

/** pipAnswered hands the engine's answer to the install waiting for it. */
export function pipAnswered(m: PipAnswer) {
  const resolve = waiting.get(m.seq);
  waiting.delete(m.seq);
  resolve?.(m);
}

// pip is micropip.install: ask is the driver's request, as JSON; so is the answer.
async function pip(ask: unknown): Promise<string> {
  let req: { requirements?: unknown } | null;
  try {
    req = JSON.parse(String(ask));
  } catch {
    return JSON.stringify({ error: "unreadable install request" });
  }
  // Installed already (a replayed cell, or a notebook run twice): nothing to ask for.
  const have = installedNames();
  const wanted = (Array.isArray(req?.requirements) ? req.requirements : []).map((r: unknown) => /^\s*([A-Za-z0-9][A-Za-z0-9._-]*)/.exec(String(r))?.[1]);
  if (wanted.length && wanted.every((n: string | undefined) => n && have.has(normName(n)))) return JSON.stringify({});
  const n = ++seq;
  const r = await new Promise<PipAnswer>((resolve) => {
    waiting.set(n, resolve);
    post({ op: "pip", seq: n, req: String(ask) });
  });
  if (r?.error) return JSON.stringify({ error: String(r.error) });
  try {
    await installWheels(r.lock ?? [], r.wheels ?? []);
  } catch (e) {
    return JSON.stringify({ error: `the install failed: ${String((e as Error)?.message ?? e).slice(0, 500)}` });
  }
  return JSON.stringify({ installed: (r.wheels ?? []).map((w) => w.name), lock: r.lock ?? [] });
}

// The distribution's package that provides a module not yet loaded; "" when none does.
function importable(name: unknown): string {
  const pkg = py?._api?._import_name_to_package_name?.get?.(String(name));
  return typeof pkg === "string" && !installedNames().has(normName(pkg)) ? pkg : "";
}

const g = globalThis as Record<string, unknown>;
g.sandchatPip = pip;
// An import no finder resolved (importlib.import_module, __import__, a name the engine
// did not see in the code): when a package of the Pyodide distribution provides the
// module, the driver's finder asks the engine for it here, as micropip.install would,
// within the run's package bounds. "" when no package provides it.
g.sandchatImportable = importable;
g.sandchatImport = async (name: unknown): Promise<string> => {
  const pkg = importable(name);
  return pkg ? await pip(JSON.stringify({ requirements: [pkg], deps: true, keepGoing: false, lock: true })) : "";
};
g.sandchatPipList = (): string => {
  const out: { name: string; version: string; source: string }[] = [];
  const lockPkgs = py?._api?.lockfile_packages ?? {};
  for (const n of Object.keys(py?.loadedPackages ?? {})) {
    out.push({ name: n, version: String(lockPkgs[n]?.version ?? ""), source: "pyodide" });
  }
  for (const w of installed) out.push({ name: w.name, version: w.version, source: "pip" });
  return JSON.stringify(out);
};
