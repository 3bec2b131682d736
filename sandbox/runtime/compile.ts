// Pyodide's wasm, compiled once by a session process's control thread for every Worker
// it starts, with the memory it declares capped at the session's.

/** compileWasm compiles the wasm at path, its memory capped at memory bytes (capMemory).
 * V8 keeps a copy of the bytes with the module: the ones read here are freed at once
 * (detached), not left for a collection this mostly idle isolate would seldom make. */
export async function compileWasm(path: string, memory: number): Promise<{ module: WebAssembly.Module; size: number }> {
  const bytes = await Deno.readFile(path);
  const size = bytes.byteLength;
  const capped = capMemory(bytes, Math.floor(memory / 65536));
  const module = await WebAssembly.compile(capped);
  bytes.buffer.transfer(0);
  capped.buffer.transfer(0);
  return { module, size };
}

// capMemory returns the module with its memory's declared maximum lowered to pages. The
// interpreter's memory is the module's own, and Python can reach it (it is on Pyodide's
// module object, and in whatever grows it): past a maximum V8 itself refuses to grow it,
// by Memory.grow or by the memory.grow of any module it is handed to, so malloc fails
// and Python raises MemoryError at the cap, however the memory was reached.
function capMemory(wasm: Uint8Array<ArrayBuffer>, pages: number): Uint8Array<ArrayBuffer> {
  const leb = (at: number): [number, number] => {
    let v = 0, shift = 0, b: number;
    do {
      b = wasm[at++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return [v, at];
  };
  const out = (v: number): number[] => {
    const r: number[] = [];
    do {
      let b = v % 128;
      v = Math.floor(v / 128);
      if (v) b |= 0x80;
      r.push(b);
    } while (v);
    return r;
  };
  for (let at = 8; at < wasm.length;) {
    const id = wasm[at];
    const [size, body] = leb(at + 1);
    if (id === 5) {
      let [count, p] = leb(body);
      const content = [...out(count)];
      for (; count > 0; count--) {
        const flags = wasm[p++];
        if (flags & ~1) throw new Error(`Pyodide's wasm memory has limits ${flags} this runtime cannot cap`);
        let min: number, max = Infinity;
        [min, p] = leb(p);
        if (flags & 1) [max, p] = leb(p);
        content.push(1, ...out(min), ...out(Math.max(min, Math.min(max, pages))));
      }
      const section = [5, ...out(content.length), ...content];
      const r = new Uint8Array(at + section.length + wasm.length - (body + size));
      r.set(wasm.subarray(0, at));
      r.set(section, at);
      r.set(wasm.subarray(body + size), at + section.length);
      return r;
    }
    at = body + size;
  }
  throw new Error("Pyodide's wasm defines no memory of its own: its size cannot be capped");
}
