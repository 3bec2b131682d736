// Powers a session must not have. Deno's permissions (host.ts) already deny processes,
// env, FFI and writes; these are the ones permissions do not cover. Called once the
// interpreter is loaded, before any user code runs.

export function harden() {
  const g = globalThis as Record<string, unknown>;
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
