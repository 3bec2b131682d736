// Package sandboxtest holds Python fixtures that the engine's tests and the API's tests
// share, so each scenario is written once.
package sandboxtest

import _ "embed"

// RichDisplay defines, in a session, Table (shown as HTML, "Table(sales=42)" as text)
// and Picture (a 12×8 PNG built without packages), plus make_png(w, h).
//
//go:embed rich_display.py
var RichDisplay string

// Stubborn keeps a core busy and ignores the interrupt, with a JavaScript worker that
// spins beside it: only a kill of the session's every task ends it.
const Stubborn = `import js
js.eval("(async () => { const { Worker } = await import('node:worker_threads'); globalThis.w = new Worker('for (;;) {}', { eval: true }) })()")
while True:
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass`

// Bomb tries what Python can reach to make processes and threads: os.fork and
// subprocess (each OSError under Pyodide), then as many JavaScript workers as it can
// (node:worker_threads, each an OS thread), up to 5000. Its result, when it ends, is
// ['OSError', 'OSError', '<workers made>[ <the error that stopped them>]'].
const Bomb = `import os, subprocess, js
out = []
for f in (os.fork, lambda: subprocess.run(["/bin/true"])):
    try:
        f()
        out.append("ran")
    except OSError as e:
        out.append(type(e).__name__)
made = await js.eval("""(async () => {
  const { Worker } = await import('node:worker_threads');
  let n = 0;
  try { for (; n < 5000; n++) new Worker('setInterval(() => {}, 1000)', { eval: true }); } catch (e) { return n + ' ' + e; }
  return String(n);
})()""")
out.append(made)
out`
