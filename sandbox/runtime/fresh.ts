// A fresh Deno + Pyodide for one run: how sandboxes that keep no interpreter state pay
// for every call. `sandchat bench` times it against the engine's warm sessions.
//   deno run --allow-read=<pyodide dir> fresh.ts <pyodide dir> <code>
const [dir, code] = Deno.args;
const { loadPyodide } = await import(new URL("file://" + dir + "/pyodide.mjs").href);
const py = await loadPyodide({ indexURL: dir + "/", stdout: () => {}, stderr: () => {} });
console.log(String(await py.runPythonAsync(code)));
