// The interrupt buffer the control thread shares with the Worker: it writes SIGINT into
// it (a Stop, a time limit, a replayed cell's limit), and Python raises
// KeyboardInterrupt. Byte 0 is what Pyodide watches, byte 1 says an interrupt came.
// Pyodide watches it only while user code runs (watchInterrupts): one that landed while
// the driver syncs /data or the working directory would break that sync instead.

import { py } from "./pyodide.ts";

let shared: Uint8Array | undefined;
// What Pyodide watches outside user code: nobody writes it.
const idle = new Uint8Array(new SharedArrayBuffer(2));

/** useInterruptBuffer takes the control thread's buffer, before the interpreter loads. */
export function useInterruptBuffer(buffer: SharedArrayBuffer) {
  shared = new Uint8Array(buffer);
}

/** watchInterrupts lets the control thread's interrupts reach Python; ignoreInterrupts
 * stops them, between runs and cells. */
export function watchInterrupts() {
  py.setInterruptBuffer(shared);
}
export function ignoreInterrupts() {
  py.setInterruptBuffer(idle);
}

/** interrupted says the control thread asked the code to stop. */
export function interrupted(): boolean {
  return shared?.[1] === 1;
}

/** raiseAgain re-arms an interrupt that came while packages loaded (or preloads ran):
 * it was raised, and swallowed, in that Python; the code must still get it. */
export function raiseAgain() {
  if (shared && shared[1] === 1) shared[0] = 2; // SIGINT
}

/** clearInterrupt forgets the interrupt, once the run it came for has ended. */
export function clearInterrupt() {
  if (!shared) return;
  shared[0] = 0;
  shared[1] = 0;
}

// sandchatSleep is time.sleep for the session (driver.py installs it): Pyodide's own
// busy-waits and never looks at the interrupt buffer, so a Stop or a time limit would wait
// for the sleep to end and the run's state could be lost to a kill. This one waits in
// short slices without spinning and answers true, consuming the interrupt, as soon as the
// host asks the code to stop; Python then raises KeyboardInterrupt there.
const sleepCell = new Int32Array(new SharedArrayBuffer(4)); // nobody writes it: waits time out
(globalThis as Record<string, unknown>).sandchatSleep = (secs: unknown): boolean => {
  const end = performance.now() + Math.max(0, Number(secs)) * 1000;
  for (;;) {
    if (shared && shared[0] !== 0) {
      shared[0] = 0; // raised once, by the caller; shared[1] still says it came
      return true;
    }
    const left = end - performance.now();
    if (!(left > 0)) return false;
    Atomics.wait(sleepCell, 0, 0, Math.min(left, 10));
  }
};
