// Powers a session must not have. Deno's permissions (host.ts) already deny processes,
// env, FFI and writes; these are the ones permissions do not cover. Called once the
// interpreter is loaded, before any user code runs.

import { Worker as NodeWorker } from "node:worker_threads";

const RefusedError = Error;

// workerRefused stands where the Worker classes' own base class was: every constructor
// of a Worker runs it (super()) before it starts a thread.
function workerRefused(): never {
  throw new RefusedError("Workers and threads cannot be started in the sandbox: code runs in the session's one interpreter");
}

// refuseWorkers makes every way to start a thread from this realm fail before the
// thread exists. A Worker started here would run user code in a realm of its own, with
// none of this Worker's hardening (Deno.exit, the memory limit on grow, the console
// that writes to the server's logs). Deno starts threads for two classes only, the web
// Worker and node:worker_threads' Worker (what `eval: true`, data: and blob: URLs,
// require("worker_threads") and process.getBuiltinModule reach too), and each class
// calls its base class first: that base becomes workerRefused, and the class is made
// non-extensible, so no code can set its base back. Subclasses, Reflect.construct and a
// class reached by any other path run the same constructor. The op underneath is not
// reachable from user code (Deno[Deno.internal].core holds no worker op): the
// isolation tests hold all of this (TestNestedWorkersRefused).
function refuseWorkers(g: Record<string, unknown>) {
  for (const C of [NodeWorker, g.Worker, g.SharedWorker]) {
    if (typeof C !== "function") continue;
    Object.setPrototypeOf(C, workerRefused);
    Object.preventExtensions(C);
  }
}

export function harden() {
  const g = globalThis as Record<string, unknown>;
  refuseWorkers(g);
  for (const name of ["Worker", "SharedWorker", "close", "caches", "CacheStorage", "Cache", "BroadcastChannel"]) {
    try {
      delete g[name];
    } catch { /* non-configurable */ }
  }
  const D = g.Deno as object;
  for (const name of ["exit", "kill", "Command", "run", "dlopen", "openKv", "serve", "listen", "listenTls", "connect", "connectTls", "startTls", "upgradeWebSocket", "chmod", "chmodSync", "chown", "chownSync"]) {
    try {
      Object.defineProperty(D, name, {
        value: () => {
          throw new Error(`Deno.${name} is not available in the sandbox`);
        },
        writable: false,
        configurable: false,
      });
    } catch { /* already locked */ }
  }
  try {
    delete g.process; // node compatibility globals carry exit() and friends
  } catch { /* ignore */ }
  try {
    Object.defineProperty(g.navigator, "gpu", { value: undefined, configurable: false });
  } catch { /* ignore */ }
  // console writes to the host's stderr, i.e. the server's logs.
  const quiet = () => {};
  const c = g.console as Record<string, unknown>;
  for (const name of ["log", "info", "warn", "error", "debug", "trace", "dir", "table"]) {
    try {
      c[name] = quiet;
    } catch { /* ignore */ }
  }
}
