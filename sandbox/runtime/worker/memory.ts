// The session's memory limit inside the Worker: a Memory that would grow past it is
// refused, so malloc fails inside the interpreter, Python raises MemoryError and the
// session lives on. The control thread also lowers the wasm module's declared maximum
// (compile.ts), which V8 enforces whoever grows the memory; the cgroup is the hard cap.
//
// The real grow is kept in this module's closure, taken as it loads (worker/main.ts:
// before any user code can run), so user code, which reaches globalThis through Python's
// `js`, cannot get it back to undo the limit.

const realGrow = WebAssembly.Memory.prototype.grow;
let cap = 512 * 1024 * 1024;

WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
  if (this.buffer.byteLength + pages * 65536 > cap) {
    throw new RangeError("sandbox memory limit reached");
  }
  return realGrow.call(this, pages);
};

/** The limit's controls: the limit itself, and a grow past it for a restore (a saved
 * heap was within the limit when it was saved). */
export type MemoryControl = {
  setLimit(bytes: number): void;
  growPastLimit(memory: WebAssembly.Memory, pages: number): void;
};

let taken = false;

/** memoryControl hands the limit's controls to their one holder, worker/main.ts, which
 * takes them as the Worker's modules load, before any user code can run. User code can
 * import this module too (an import() of a module already loaded needs no permission):
 * it gets nothing. */
export function memoryControl(): MemoryControl {
  if (taken) throw new Error("the memory limit's controls are taken");
  taken = true;
  return {
    setLimit: (bytes) => {
      cap = bytes;
    },
    growPastLimit: (memory, pages) => {
      realGrow.call(memory, pages);
    },
  };
}
