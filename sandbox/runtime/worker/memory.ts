// The session's memory limit inside the Worker: a Memory that would grow past it is
// refused, so malloc fails inside the interpreter, Python raises MemoryError and the
// session lives on. The control thread also lowers the wasm module's declared maximum
// (compile.ts), which V8 enforces whoever grows the memory; the cgroup is the hard cap.
//
// The real grow is kept in this module's closure, taken as it loads (worker/main.ts:
// before any user code can run), so user code, which reaches globalThis through Python's
// `js`, cannot get it back to undo the cap.

const realGrow = WebAssembly.Memory.prototype.grow;
let cap = 512 * 1024 * 1024;

WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
  if (this.buffer.byteLength + pages * 65536 > cap) {
    throw new RangeError("sandbox memory limit reached");
  }
  return realGrow.call(this, pages);
};

/** setMemoryCap sets the session's limit, in bytes. */
export function setMemoryCap(bytes: number) {
  cap = bytes;
}

/** growForRestore grows memory past nothing but the module's own maximum: room for a
 * saved heap, which was within the limit when it was saved. */
export function growForRestore(memory: WebAssembly.Memory, pages: number) {
  realGrow.call(memory, pages);
}
