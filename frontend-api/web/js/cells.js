// Code cells and the display items of their runs.
import { marked } from "/vendor/marked-15.0.12.esm.js";
import { state } from "/js/state.js";
import { $, el, sanitize, codeBlock, copyButton } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { containerFor, whoOf, nearBottom, scrollToEnd } from "/js/messages.js";
import { fileURL, thumbnail, downloadChip } from "/js/files.js";
import { drawOutput } from "/js/outputs.js";

const IMAGE_TYPES = ["image/png", "image/svg+xml", "image/jpeg", "image/gif", "image/webp"];

export function cellEl(callID) { return callID ? $("messages").querySelector(`[data-call="${CSS.escape(callID)}"]`) : null; }

export function ensureCell(callID, code, path, turnID) {
  let cell = cellEl(callID);
  if (cell) return cell;
  $("messages").querySelector(":scope > li.empty")?.remove();
  const lines = (code || "").split("\n").length;
  const codeDetails = el("details", { className: "cell-code", open: lines <= 15 },
    el("summary", { textContent: `Python · ${lines} line${lines === 1 ? "" : "s"}` }), codeBlock(code || ""));
  const status = el("span", { className: "status running", textContent: "running…", attrs: { "aria-live": "off" } });
  const out = el("pre", { className: "cell-out", hidden: true, attrs: { "aria-label": "Output" } });
  const displays = el("div", { className: "cell-displays", hidden: true, attrs: { role: "group", "aria-label": "Displayed" } });
  cell = el("li", { className: "cell", dataset: { call: callID, turn: turnID ? String(turnID) : "" } },
    el("div", { className: "cell-head" }, el("span", { className: "who", textContent: `${whoOf(path)} ran Python` }), status),
    codeDetails, el("div", { className: "code-wrap out-wrap" }, out, copyButton("Copy output", () => out.textContent)), displays, el("div", { className: "cell-result" }));
  cell.statusEl = status;
  cell.outEl = out;
  cell.displayBox = displays;
  cell.displayURLs = [];
  containerFor(path).append(cell);
  return cell;
}

export function appendOutput(cell, text, stream) {
  if (cell.dataset.done) return;
  const near = nearBottom();
  cell.outEl.hidden = false;
  const last = cell.outEl.lastChild;
  if (last && last.dataset.stream === (stream || "stdout")) last.textContent += text;
  else cell.outEl.append(el("span", { className: stream === "stderr" ? "stderr" : "stdout", dataset: { stream: stream || "stdout" }, textContent: text }));
  if (near) scrollToEnd();
}

export function finishCell(callID, r) {
  const cell = cellEl(callID);
  if (cell && Array.isArray(r.displays)) {
    setDisplays(cell, r.displays);
    // An event leaves out parts too large for it; the stored run has them.
    if (r.execution_id && r.displays.some((d) => d.truncated)) guard(() => fullDisplays(cell, r.execution_id));
  }
  if (!cell || cell.dataset.done) return;
  cell.dataset.done = "1";
  cell.dataset.status = r.status || "";
  const ok = r.status === "success";
  // A run the user stopped keeps what it printed; the interrupt's traceback is not news.
  const stopped = r.status === "stopped";
  cell.statusEl.className = "status " + (ok ? "ok" : stopped ? "stopped" : "failed");
  cell.statusEl.textContent = ok ? `done${r.execution_ms ? ` in ${(r.execution_ms / 1000).toFixed(1)} s` : ""}` : stopped ? "stopped" : r.status === "timeout" ? "timed out" : r.status === "refused" ? "not run" : "error";
  drawOutput(cell, r);
  const res = cell.querySelector(".cell-result");
  res.replaceChildren();
  const value = r.result && typeof r.result === "object" ? r.result.result : r.result;
  if (value !== undefined && value !== null && value !== "") res.append(el("pre", { className: "result", attrs: { "aria-label": "Result" }, textContent: value }));
  const err = typeof r.error === "string" ? safeJSON(r.error) : r.error;
  if (!stopped && err && (err.traceback || err.message || err.type)) {
    res.append(el("div", { className: "error-box", attrs: { role: "group", "aria-label": "Error" } },
      el("strong", { textContent: `${err.type || "Error"}: ${err.message || ""}` }),
      err.traceback ? el("pre", { className: "traceback", textContent: err.traceback }) : null));
  }
  // An image shown as a display item is a file too; it is not shown again as an artifact.
  const shown = new Set((r.displays || []).map((d) => d.image?.file_id).filter(Boolean));
  const arts = (r.artifacts || []).filter((a) => !shown.has(a.id));
  const images = arts.filter((a) => IMAGE_TYPES.includes(a.content_type));
  const others = arts.filter((a) => !IMAGE_TYPES.includes(a.content_type));
  if (images.length) res.append(el("div", { className: "thumbs" }, images.map(thumbnail)));
  if (others.length) res.append(el("ul", { className: "chips" }, others.map((f) => el("li", {}, downloadChip(f)))));
}

async function fullDisplays(cell, executionID) {
  const conv = state.conv;
  const run = await api("GET", `/conversations/${conv.id}/sandbox/executions/${executionID}`);
  if (state.conv === conv && cell.isConnected && Array.isArray(run.displays)) setDisplays(cell, run.displays);
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

function safeJSON(s) { try { return JSON.parse(s); } catch { return { message: s }; } }

function sanitizedBox(className, html) {
  const box = el("div", { className: "display-html " + className });
  box.innerHTML = sanitize(html);
  return box;
}

// What an item shows: the richest part the page can render safely, as Jupyter does.
function displayBody(d, cell) {
  if (d.html) return sanitizedBox("html", d.html);
  if (d.markdown) return sanitizedBox("md", marked.parse(d.markdown));
  if (d.svg) {
    // An SVG is shown as an image: in an <img> it runs no script and loads nothing.
    const url = URL.createObjectURL(new Blob([d.svg], { type: "image/svg+xml" }));
    cell.displayURLs.push(url);
    return el("img", { className: "display-svg", src: url, alt: d.text && d.text !== "<display>" ? d.text : "SVG image" });
  }
  if (d.image) return displayImage(d.image);
  if (d.latex) return el("pre", { className: "display-text latex", textContent: d.latex });
  if (d.json !== undefined && d.json !== null) {
    let text;
    try { text = JSON.stringify(typeof d.json === "string" ? JSON.parse(d.json) : d.json, null, 2); } catch { text = String(d.json); }
    return el("pre", { className: "display-text json", textContent: text });
  }
  return el("pre", { className: "display-text", textContent: d.text || "" });
}

// An image is a file of the conversation once its run is stored: it is fetched with the
// token (an <img src> cannot send it). While the run streams it has no file yet, and a
// box of its size holds its place.
function displayImage(img) {
  const w = img.width || undefined, h = img.height || undefined;
  if (!img.file_id) {
    const box = el("div", { className: "display-pending", attrs: { role: "img", "aria-label": `${img.name}, ${w}×${h}, loading` }, textContent: `${img.name} · ${w}×${h}` });
    if (w && h && w >= 160) { box.style.aspectRatio = `${w} / ${h}`; box.style.width = `min(${w}px, 100%)`; }
    return box;
  }
  const i = el("img", { className: "display-image", alt: img.name, width: w, height: h, dataset: { file: String(img.file_id) } });
  fileURL(img.file_id).then((u) => { i.src = u; }, () => { i.alt = `${img.name} (unavailable)`; });
  return i;
}

function displayEl(d, cell) {
  const index = Number(d.index ?? cell.displayBox.childElementCount);
  const label = d.html ? "HTML" : d.markdown ? "Markdown" : d.svg ? "SVG image" : d.image ? "image" : d.latex ? "LaTeX" : d.json !== undefined && d.json !== null ? "JSON" : "text";
  return el("div", { className: "display", dataset: { index: String(index) }, attrs: { role: "group", "aria-label": `Display ${index + 1}: ${label}` } },
    displayBody(d, cell),
    d.truncated ? el("p", { className: "hint", textContent: "Too large to show here in full." }) : null);
}

// addDisplay draws one streamed item, once: a replayed event or the run's own list may
// bring it again.
export function addDisplay(cell, d) {
  if (d.index !== undefined && cell.displayBox.querySelector(`:scope > [data-index="${Number(d.index)}"]`)) return;
  const e = displayEl(d, cell);
  const after = [...cell.displayBox.children].find((c) => Number(c.dataset.index) > Number(e.dataset.index));
  cell.displayBox.insertBefore(e, after || null);
  cell.displayBox.hidden = false;
}

// setDisplays draws a finished run's items, which replace the streamed ones: they are
// complete, in order, and their images have file ids.
function setDisplays(cell, items) {
  for (const u of cell.displayURLs) URL.revokeObjectURL(u);
  cell.displayURLs = [];
  cell.displayBox.replaceChildren(...items.map((d, i) => displayEl({ index: i, ...d }, cell)));
  cell.displayBox.hidden = !items.length;
}
