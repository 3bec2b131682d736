// Code cells and the display items of their runs.
import { state } from "/js/state.js";
import { $, el, codeBlock, copyButton } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { containerFor, whoOf, nearBottom, scrollToEnd } from "/js/thread.js";
import { thumbnail, downloadChip } from "/js/files.js";
import { displayEl, keptFrame } from "/js/displays.js";
import { clipOutput, offerShowAll, shownWhole } from "/js/outputs.js";

const IMAGE_TYPES = ["image/png", "image/svg+xml", "image/jpeg", "image/gif", "image/webp"];

// SERVER_RESTART is the error type of a run the server's shutdown interrupted
// (toolkits.ErrServerRestart): what it did is not kept.
const SERVER_RESTART = "ServerRestart";

export function cellEl(callID) { return callID ? $("messages").querySelector(`[data-call="${CSS.escape(callID)}"]`) : null; }

export function ensureCell(callID, code, path, turnID) {
  let cell = cellEl(callID);
  if (cell) return cell;
  $("messages").querySelector(":scope > li.empty")?.remove();
  const lines = (code || "").split("\n").length;
  const codeDetails = el("details", { className: "cell-code", open: lines <= 15 },
    el("summary", { textContent: `Python · ${lines} line${lines === 1 ? "" : "s"}` }), codeBlock(code || ""));
  const status = el("span", { className: "status running", textContent: "running…", attrs: { "aria-live": "off" } });
  // What the run printed and displayed, in the order it came.
  const stream = el("div", { className: "cell-stream", hidden: true });
  // Copy output is offered once there is printed text to copy.
  const copy = copyButton("Copy output", () => outputText(cell));
  copy.hidden = true;
  cell = el("li", { className: "cell", dataset: { call: callID, turn: turnID ? String(turnID) : "" } },
    el("div", { className: "cell-head" }, el("span", { className: "who", textContent: `${whoOf(path)} ran Python` }), status),
    codeDetails, el("div", { className: "code-wrap out-wrap" }, stream, copy),
    el("div", { className: "cell-result" }));
  cell.statusEl = status;
  cell.streamEl = stream;
  cell.copyEl = copy;
  cell.displayURLs = [];
  // Each output box follows its end while the output grows, unless the reader scrolled
  // up inside it: then it stays where they left it (outFollow, outTop).
  cell.outFollow = true;
  cell.outTop = 0;
  // What streamed, and where it went from one stream to the other (bytes of each
  // written by then): the order the run's record keeps no trace of (layOut).
  cell.streamed = { stdout: "", stderr: "", last: "" };
  cell.switches = [];
  containerFor(path, turnID).append(cell);
  return cell;
}

export function appendOutput(cell, text, stream) {
  if (cell.dataset.done) return;
  const near = nearBottom();
  cell.streamEl.hidden = false;
  let out = cell.streamEl.lastElementChild;
  if (!out?.matches("pre.cell-out")) cell.streamEl.append(out = outBlock(cell));
  const last = out.lastChild;
  if (last && last.dataset.stream === (stream || "stdout")) last.textContent += text;
  else out.append(outSpan(stream, text));
  const s = stream === "stderr" ? "stderr" : "stdout", seen = cell.streamed;
  if (seen.last && seen.last !== s) cell.switches.push({ stdout: utf8Length(seen.stdout), stderr: utf8Length(seen.stderr) });
  seen[s] += text;
  seen.last = s;
  cell.copyEl.hidden = false;
  if (follows(cell, out)) pinOutput(out);
  if (near) scrollToEnd();
}

function utf8Length(s) { return new TextEncoder().encode(s).length; }

// Within this many pixels of its end an output box counts as at its end.
const OUT_SLACK = 4;

function pinOutput(pre) {
  pre.scrollTop = pre.scrollHeight;
  pre.lastTop = pre.scrollTop;
}

function outAtEnd(pre) { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < OUT_SLACK; }

// follows tells whether cell's output keeps to its end. A move up inside pre whose
// scroll event has not come yet (it comes with the next frame, later on a busy
// machine) is already the reader leaving: pinning now would undo it.
function follows(cell, pre) {
  if (cell.outFollow && pre.scrollTop < pre.lastTop - 1 && !outAtEnd(pre)) {
    cell.outFollow = false;
    if (pre === cell.streamEl.querySelector("pre.cell-out:last-of-type")) cell.outTop = pre.scrollTop;
  }
  return cell.outFollow;
}

// An output box of cell: a move up by the reader inside it stops its following; back at
// its end, it follows again. A move down, or none, is the box being pinned.
function outBlock(cell, ...spans) {
  const pre = el("pre", { className: "cell-out", attrs: { "aria-label": "Output" } }, ...spans);
  pre.lastTop = 0;
  pre.addEventListener("scroll", () => {
    const atEnd = outAtEnd(pre);
    if (pre.scrollTop < pre.lastTop - 1) cell.outFollow = atEnd;
    else if (atEnd) cell.outFollow = true;
    pre.lastTop = pre.scrollTop;
    if (pre === cell.streamEl.querySelector("pre.cell-out:last-of-type")) cell.outTop = pre.scrollTop;
  }, { passive: true });
  return pre;
}

// replaceKeeping makes parts the children of box without moving those of them already
// there (in the same order): a frame taken out of the page, even for a moment, loads
// again from the start.
function replaceKeeping(box, parts) {
  const keep = new Set(parts);
  for (const c of [...box.children]) if (!keep.has(c)) c.remove();
  let next = box.firstElementChild;
  for (const p of parts) {
    if (p === next) { next = next.nextElementSibling; continue; }
    box.insertBefore(p, next);
  }
}

// outputText is what the cell shows of its output, as one text.
function outputText(cell) {
  return [...cell.streamEl.querySelectorAll("pre.cell-out")].map((p) => p.textContent).join("");
}

function outSpan(stream, text) {
  const s = stream === "stderr" ? "stderr" : "stdout";
  return el("span", { className: s, dataset: { stream: s }, textContent: text });
}

// layOut draws a finished run's output and items in the order they came: each item
// says how much of stdout and stderr was written before it, and the run's order where
// the output went from one stream to the other. Runs recorded before items said so show
// their output first, as they always did; runs recorded before the order was kept keep
// it where this page saw the whole output stream.
function layOut(cell, out, items) {
  for (const u of cell.displayURLs) URL.revokeObjectURL(u);
  cell.displayURLs = [];
  const enc = new TextEncoder(), dec = new TextDecoder();
  // Up to 16 KiB of each is drawn unless the cell shows all (outputs.js).
  const bytes = { stdout: clipOutput(cell, enc.encode(out.stdout || "")), stderr: clipOutput(cell, enc.encode(out.stderr || "")) };
  const pos = { stdout: 0, stderr: 0 };
  const parts = [];
  let box = null; // the output box text goes on in, until an item comes
  const upTo = (at) => {
    for (const s of ["stdout", "stderr"]) {
      const end = Math.min(bytes[s].length, Math.max(pos[s], at ? Number(at[s]) || 0 : Infinity));
      if (end > pos[s]) {
        if (!box) parts.push(box = outBlock(cell));
        box.append(outSpan(s, dec.decode(bytes[s].subarray(pos[s], end))));
      }
      pos[s] = end;
    }
  };
  const seen = cell.streamed;
  const switches = Array.isArray(out.order) ? out.order :
    seen && seen.stdout === (out.stdout || "") && seen.stderr === (out.stderr || "") ? cell.switches : [];
  const written = (at) => Number(at.stdout) + Number(at.stderr);
  let next = 0;
  const text = (at) => {
    while (next < switches.length && (!at || written(switches[next]) <= written(at))) upTo(switches[next++]);
    upTo(at);
  };
  const ordered = items.every((d) => d.at);
  if (!ordered) text(null);
  const drawn = new Map([...cell.streamEl.querySelectorAll(":scope > .display")].map((e) => [e.dataset.index, e]));
  items.forEach((d, i) => {
    if (ordered) text(d.at);
    parts.push(d instanceof Element ? d : keptFrame(drawn.get(String(i)), displayEl(d, cell, i)));
    box = null;
  });
  text(null);
  replaceKeeping(cell.streamEl, parts);
  cell.streamEl.hidden = !parts.length;
  cell.copyEl.hidden = !outputText(cell);
  // The boxes drawn anew keep to their end, or to where the reader left the last one.
  const boxes = [...cell.streamEl.querySelectorAll(":scope > pre.cell-out")];
  boxes.forEach((pre, i) => {
    if (follows(cell, pre)) pinOutput(pre);
    else if (i === boxes.length - 1) { pre.scrollTop = cell.outTop; pre.lastTop = pre.scrollTop; }
  });
}

export function finishCell(callID, r) {
  const cell = cellEl(callID);
  if (cell && Array.isArray(r.displays)) {
    // A later record of a finished run (the tool message of a turn) may carry its items
    // without its output: what the cell shows of it stays.
    // A cell showing all of its run keeps to the stored run, whole.
    const all = shownWhole(cell);
    if (all) cell.output = { stdout: all.stdout || "", stderr: all.stderr || "", order: all.order };
    else if (!cell.dataset.done || r.stdout || r.stderr || !cell.output) cell.output = { stdout: r.stdout || "", stderr: r.stderr || "", order: r.order };
    layOut(cell, cell.output, r.displays);
    // An event leaves out items too large for it; the stored run has them.
    if (r.execution_id && r.displays.some((d) => d.truncated)) guard(() => fullDisplays(cell, r.execution_id));
  }
  if (!cell || cell.dataset.done) return;
  cell.dataset.done = "1";
  const ok = r.status === "success";
  // A run the user stopped keeps what it printed; the interrupt's traceback is not news.
  // Code that did not stop at the interrupt was ended with its process: the session went
  // back to its last saved state, and the run's record says so, which the cell shows.
  const stopped = r.status === "stopped";
  const err = typeof r.error === "string" ? safeJSON(r.error) : r.error;
  // A run the server's restart cut off: its session goes on from its state before it.
  const restart = stopped && err?.type === SERVER_RESTART;
  const restored = stopped && !restart && err?.message && err.type !== "KeyboardInterrupt";
  cell.statusEl.className = "status " + (ok ? "ok" : stopped && !restart ? "stopped" : "failed");
  cell.statusEl.textContent = ok ? `done${r.execution_ms ? ` in ${duration(r.execution_ms)}` : ""}` : restart ? "interrupted by a server restart" :
    stopped ? (restored ? "stopped · state restored" : "stopped") : r.status === "timeout" ? "timed out" : r.status === "refused" ? "not run" : "error";
  // The final output replaces what streamed: it is complete and in order. Without the
  // run's items (a tool message), those that streamed stay, after it.
  if (!Array.isArray(r.displays)) layOut(cell, { stdout: r.stdout, stderr: r.stderr, order: r.order }, [...cell.streamEl.querySelectorAll(":scope > .display")]);
  offerShowAll(cell, r, (run) => layOut(cell, run, Array.isArray(run.displays) ? run.displays : [...cell.streamEl.querySelectorAll(":scope > .display")]));
  const res = cell.querySelector(".cell-result");
  res.replaceChildren();
  const value = r.result && typeof r.result === "object" ? r.result.result : r.result;
  // A value shown in a richer form (its HTML, an image: a display item of kind result)
  // is not shown again as its text, as Jupyter shows the richest form only.
  const rich = (r.displays || []).some((d) => d.kind === "result") || cell.streamEl.querySelector(':scope > .display[data-kind="result"]');
  if (value !== undefined && value !== null && value !== "" && !rich) res.append(el("pre", { className: "result", attrs: { "aria-label": "Result" }, textContent: value }));
  if (restored || restart) res.append(el("p", { className: "stop-note", attrs: { role: "note" }, textContent: err.message }));
  if (!stopped && err && (err.traceback || err.message || err.type)) res.append(errorBox(err));
  // An image shown as a display item is a file too; it is not shown again as an artifact.
  const shown = new Set((r.displays || []).map((d) => d.image?.file_id).filter(Boolean));
  const arts = (r.artifacts || []).filter((a) => !shown.has(a.id));
  const images = arts.filter((a) => IMAGE_TYPES.includes(a.content_type));
  const others = arts.filter((a) => !IMAGE_TYPES.includes(a.content_type));
  if (images.length) res.append(el("div", { className: "thumbs" }, images.map(thumbnail)));
  if (others.length) res.append(el("ul", { className: "chips" }, others.map((f) => el("li", {}, downloadChip(f)))));
}

// errorBox says what a run raised, once. A traceback ends with the error's own line:
// that line is drawn strong under the frames (always in view, however long they are),
// not also above them.
function errorBox(err) {
  const head = err.message ? `${err.type || "Error"}: ${err.message}` : err.type || "Error";
  let tb = (err.traceback || "").replace(/\n+$/, "");
  const strong = el("strong", { className: "error-line", textContent: head });
  const box = el("div", { className: "error-box", attrs: { role: "group", "aria-label": "Error" } });
  if (tb === head || tb.endsWith("\n" + head)) {
    tb = tb.slice(0, tb.length - head.length).replace(/\n+$/, "");
    box.append(tb ? el("pre", { className: "traceback", textContent: tb }) : null, strong);
  } else box.append(strong, tb ? el("pre", { className: "traceback", textContent: tb }) : null);
  return box;
}

async function fullDisplays(cell, executionID) {
  const conv = state.conv;
  const run = await api("GET", `/conversations/${conv.id}/sandbox/executions/${executionID}`);
  if (state.conv?.id === conv.id && cell.isConnected && Array.isArray(run.displays)) layOut(cell, run, run.displays);
}

// clearCell takes away what a running cell showed so far: the run cleared its output.
// What it prints from now on is all its record keeps.
function clearCell(cell) {
  for (const u of cell.displayURLs) URL.revokeObjectURL(u);
  cell.displayURLs = [];
  cell.streamEl.replaceChildren();
  cell.streamEl.hidden = true;
  cell.streamed = { stdout: "", stderr: "", last: "" };
  cell.switches = [];
  cell.copyEl.hidden = true;
}

// showConnection says on each running cell whether its output can reach the page:
// while the server cannot be reached, nothing more comes (status: online, reconnecting
// or offline).
export function showConnection(status) {
  $("messages").querySelectorAll(".cell:not([data-done])").forEach((c) => {
    c.statusEl.className = "status " + (status === "online" ? "running" : "waiting");
    c.statusEl.textContent = status === "online" ? "running…" : status === "offline" ? "offline" : "reconnecting…";
  });
}

// endOpenCells marks the cells whose run never reported back (the turn was stopped or
// failed under them), except those of the running turn.
export function endOpenCells(text, runningTurn) {
  $("messages").querySelectorAll(".cell[data-call]:not([data-done])").forEach((c) => {
    if (runningTurn && c.dataset.turn === String(runningTurn)) return;
    c.dataset.done = "1";
    c.statusEl.className = "status failed";
    c.statusEl.textContent = text;
  });
}

// duration says how long a run took: milliseconds under a second, as a fast run's
// "0.0 s" would say nothing.
function duration(ms) { return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`; }

function safeJSON(s) { try { return JSON.parse(s); } catch { return { message: s }; } }

// addDisplay draws one streamed item, once (a replayed event or the run's own list may
// bring it again), after the output printed before it. Two kinds change what is drawn
// instead: clear (IPython's clear_output: what the run showed so far goes) and update
// (a display handle's update: the items of its id are drawn anew, in place).
export function addDisplay(cell, d) {
  if (d.kind === "clear") return clearCell(cell);
  if (d.kind === "update") {
    for (const old of cell.streamEl.querySelectorAll(":scope > .display[data-display-id]")) {
      if (old.dataset.displayId === d.id) old.replaceWith(displayEl({ ...d, kind: old.dataset.kind }, cell, Number(old.dataset.index)));
    }
    return;
  }
  const index = Number(d.index ?? cell.streamEl.querySelectorAll(":scope > .display").length);
  if (cell.streamEl.querySelector(`:scope > .display[data-index="${index}"]`)) return;
  const e = displayEl(d, cell, index);
  const after = [...cell.streamEl.querySelectorAll(":scope > .display")].find((c) => Number(c.dataset.index) > index);
  cell.streamEl.insertBefore(e, after || null);
  cell.streamEl.hidden = false;
}
