// Pyodide's wasm, compiled once by the control thread (compile.ts) and handed to the
// Worker: Pyodide's own load would compile ~10 MB of wasm again in each Worker. The hook
// on WebAssembly.instantiate, set as this module loads (worker/main.ts: before any user
// code can run), gives the loader that module instead, and tells a restore (restore.ts)
// of the interpreter's memory.

import { restoreInstantiated } from "./restore.ts";

let shared: WebAssembly.Module | undefined;
let sharedSize = 0;
const realInstantiate = WebAssembly.instantiate;

/** shareModule hands the next instantiation of a wasm of size bytes the compiled module. */
export function shareModule(module: WebAssembly.Module, size: number) {
  shared = module;
  sharedSize = size;
}

/** moduleShared says the module handed over was used. */
export const moduleShared = (): boolean => shared === undefined;

// release frees the memory of a buffer no longer needed at once, whoever still holds it:
// the buffer is detached, and its contents move to one that is dropped.
function release(b: ArrayBuffer | ArrayBufferView) {
  const ab = ArrayBuffer.isView(b) ? b.buffer : b;
  if (ab instanceof ArrayBuffer && !ab.detached) ab.transfer(0);
}

type Source = BufferSource | WebAssembly.Module;

(WebAssembly as { instantiate: unknown }).instantiate = async function (src: Source, imports?: WebAssembly.Imports) {
  let result: WebAssembly.WebAssemblyInstantiatedSource | WebAssembly.Instance;
  if (shared && !(src instanceof WebAssembly.Module) && src?.byteLength === sharedSize) {
    const module = shared;
    shared = undefined;
    // The loader read the wasm file only to hear that it is compiled already. Its copy
    // (~9 MB) would live as long as the loader's closures, i.e. the process: release it.
    release(src);
    result = { module, instance: await realInstantiate(module, imports) };
  } else {
    result = await (realInstantiate as (s: Source, i?: WebAssembly.Imports) => Promise<typeof result>)(src, imports);
  }
  const instance = result instanceof WebAssembly.Instance ? result : result.instance;
  const mem = instance?.exports?.memory;
  if (mem instanceof WebAssembly.Memory) restoreInstantiated(mem);
  return result;
};
