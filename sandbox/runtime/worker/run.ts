// A run: /data brought up to date, the code's packages loaded (before its time limit),
// the code run through the driver with interrupts let through, then its output, its
// value or exception, and what it did to the files, reported in one "done".

import type { RunDone, RunError, ToWorker } from "../messages.ts";
import { noteCompiled } from "./checkpoint.ts";
import { syncData } from "./data.ts";
import { callDriver, driverOf, quietRun } from "./driver.ts";
import { clearInterrupt, ignoreInterrupts, interrupted, raiseAgain, watchInterrupts } from "./interrupt.ts";
import { openOutput } from "./output.ts";
import { post } from "./post.ts";
import { py } from "./pyodide.ts";
import { FileWatch } from "./workdir.ts";

const quiet = { messageCallback: () => {}, errorCallback: () => {} };

export async function run(m: Extract<ToWorker, { op: "run" }>) {
  const t0 = performance.now();
  const timings: Record<string, number> = {};
  const lap = (name: string) => (timings[name] = performance.now() - t0);
  syncData(m.data ?? [], m.dataVersions && typeof m.dataVersions === "object" ? m.dataVersions : {});
  const files = new FileWatch();
  const output = openOutput(m.run, m);
  const loadErrors = await loadPackages(m);
  const driver = driverOf();
  post({ op: "started" }); // the run's time limit starts now
  watchInterrupts();
  // An interrupt that came while packages loaded (or preloads ran) was raised, and
  // swallowed, in that Python: the host's flag still says it came, so the code gets it.
  raiseAgain();
  for (const n of m.preload ?? []) {
    const e = await quietRun(`import ${n}`, "<preload>");
    if (e) output.stderr.write(new TextEncoder().encode(`[sandbox] preload of ${n} failed: ${e}\n`));
  }
  raiseAgain();
  let status: RunDone["status"] = "success", result: string | null = null, error: RunError | null = null, compiled: string[] = [];
  try {
    const [s, v, e, so] = await callDriver(m.code, m.filename, m.maxOutput, driver);
    compiled = so ?? [];
    status = s;
    result = v ?? null;
    if (e) error = { type: e[0], message: e[1], traceback: e[2] };
  } catch (e) {
    // The driver answers for every Python exception of the code: one that reaches here
    // is the driver's own failure (the interpreter failed, or code of the session's broke
    // the driver), and the process is done with; unless the host's interrupt landed
    // outside the code, which ends the run as a timeout.
    if (!interrupted()) throw e;
    status = "error";
    error = { type: "SandboxError", message: String((e as Error)?.message ?? e), traceback: "" };
  } finally {
    ignoreInterrupts();
  }
  if (error?.type === "ModuleNotFoundError" && loadErrors.length) {
    // The load's own errors name server paths and hosts: they go to the process's log.
    // What the user reads comes from the engine, through the import that failed
    // (driver.py, DistributionFinder).
    console.error(`package load failed: ${loadErrors.join("; ").slice(0, 2000)}`);
  }
  lap("python");
  const said = output.close();
  const stopped = interrupted();
  clearInterrupt();
  if (stopped && status !== "success") {
    // The interrupt can land in the event loop rather than in user code; either way the
    // run ended because the host asked it to.
    status = "timeout";
    if (!error || error.type !== "KeyboardInterrupt") error = { type: "KeyboardInterrupt", message: "", traceback: error?.traceback ?? "" };
  }
  const changes = files.changes(m);
  lap("files");
  const packages = Object.keys(py.loadedPackages ?? {});
  noteCompiled(compiled);
  post({ op: "done", run: m.run, status, result, error, ...said, ...changes, packages, timings });
}

// loadPackages loads the packages of the preload's and the code's imports: before the
// run's time limit (importing them is Python, and counts). It answers the load's errors.
async function loadPackages(m: Extract<ToWorker, { op: "run" }>): Promise<string[]> {
  const loadErrors: string[] = [];
  if (m.preload?.length) {
    // Validated module names (the engine checks them), imported before the code.
    const code = m.preload.map((n: string) => `import ${n}`).join("\n");
    await py.loadPackagesFromImports(code, quiet).catch(() => {});
  }
  if (/\bimport\b/.test(m.code)) {
    try {
      await py.loadPackagesFromImports(m.code, { messageCallback: () => {}, errorCallback: (e: string) => loadErrors.push(String(e)) });
    } catch (e) {
      // The import in user code reports the failure; this says why.
      loadErrors.push(String((e as Error)?.message ?? e));
    }
  }
  return loadErrors;
}
