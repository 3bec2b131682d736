// A run's output: stdout and stderr streamed to the control thread as they are written,
// in the order they were written, cut at the run's limit; and its display items, as the
// driver's display() hands them over, bounded in count and bytes. Pyodide's handlers are
// installed once (connectOutput), which keeps four FFI calls off every run; between runs
// output goes nowhere.

import { isDisplayKind, type RunLimits } from "../messages.ts";
import { post } from "./post.ts";
import { py } from "./pyodide.ts";

type Write = (b: Uint8Array) => number;
const discard: Write = (b) => b.length;
const sinks = { stdout: discard, stderr: discard };

/** connectOutput sends the interpreter's output to the run in progress, and gives it
 * no interactive stdin: reads see end of file (input() raises a clear EOFError). */
export function connectOutput() {
  py.setStdout({ write: (b: Uint8Array) => sinks.stdout(b) });
  py.setStderr({ write: (b: Uint8Array) => sinks.stderr(b) });
  py.setStdin({ stdin: () => null });
}

// The display items of the run in progress: sent at once (after the output before
// them); what does not fit is counted, and the engine says so. An update (of a display
// handle's item) counts its bytes only; a clear (clear_output) takes away what came
// before it, so the items after it count afresh. The engine keeps its own count.
const displays = { run: "", active: false, count: 0, bytes: 0, max: 0, maxBytes: 0, dropped: 0, flush: () => {} };
(globalThis as Record<string, unknown>).sandchatDisplay = (kind: unknown, item: unknown) => {
  if (!displays.active || !isDisplayKind(kind) || typeof item !== "string") return;
  if (kind === "clear") {
    displays.count = 0;
    displays.bytes = 0;
  } else if ((kind !== "update" && displays.count >= displays.max) || displays.bytes + item.length > displays.maxBytes) {
    displays.dropped++;
    return;
  }
  if (kind !== "update" && kind !== "clear") displays.count++;
  displays.bytes += item.length;
  displays.flush();
  post({ op: "display", run: displays.run, kind, item });
};

type StreamState = { bytes: number; text: string; truncated: boolean };
type Sink = { write: Write; flush: () => void };

// makeSink is one stream of a run's output. before runs ahead of each write: it sends
// what the other stream holds back, so the chunks go out in the order they were written.
function makeSink(run: string, stream: "stdout" | "stderr", limit: number, state: StreamState, before: () => void): Sink {
  const dec = new TextDecoder();
  let pending = "";
  let last = -Infinity;
  let cutSent = false;
  // The chunk that reaches the limit says so: the engine marks the output it kept from
  // the stream as cut, as the run's reply does, should the reply never come.
  const flush = () => {
    if (!pending && !(state.truncated && !cutSent)) return;
    post({ op: "out", run, stream, chunk: pending, truncated: state.truncated });
    cutSent = state.truncated;
    pending = "";
    last = performance.now();
  };
  const write = (buf: Uint8Array) => {
    if (state.truncated) return buf.length;
    before();
    let b = buf;
    if (state.bytes + b.length > limit) {
      b = b.subarray(0, Math.max(0, limit - state.bytes));
      state.truncated = true;
    }
    state.bytes += b.length;
    const s = dec.decode(b, { stream: !state.truncated });
    state.text += s;
    pending += s;
    // Chunks go out as they come unless the program prints faster than 20 a second.
    if (pending.length >= 8192 || performance.now() - last > 50 || state.truncated) flush();
    return buf.length;
  };
  return { write, flush };
}

/** RunOutput is the output of one run, from openOutput to close. */
export type RunOutput = {
  stdout: Sink;
  stderr: Sink;
  /** close sends what is held back, stops the run's output and says what it was. */
  close(): { stdout: string; stderr: string; stdoutTruncated: boolean; stderrTruncated: boolean; displaysDropped: number };
};

/** openOutput sends the interpreter's output and display items to run, within limits. */
export function openOutput(run: string, limits: Pick<RunLimits, "maxOutput" | "maxDisplays" | "maxDisplayBytes">): RunOutput {
  const out: StreamState = { bytes: 0, text: "", truncated: false }, err: StreamState = { bytes: 0, text: "", truncated: false };
  const so: Sink = makeSink(run, "stdout", limits.maxOutput, out, () => se.flush());
  const se: Sink = makeSink(run, "stderr", limits.maxOutput, err, () => so.flush());
  sinks.stdout = so.write;
  sinks.stderr = se.write;
  Object.assign(displays, {
    run, active: true, count: 0, bytes: 0, dropped: 0, max: limits.maxDisplays ?? 0, maxBytes: limits.maxDisplayBytes ?? 0,
  });
  displays.flush = () => {
    so.flush();
    se.flush();
  };
  return {
    stdout: so,
    stderr: se,
    close() {
      so.flush();
      se.flush();
      sinks.stdout = sinks.stderr = discard;
      displays.active = false;
      return {
        stdout: out.text, stderr: err.text, stdoutTruncated: out.truncated, stderrTruncated: err.truncated,
        displaysDropped: displays.dropped,
      };
    },
  };
}
