// A finished cell's printed output. Up to 16 KiB of each stream is drawn (what an event
// carries); past that the cell says so and offers "Show all", which fetches the stored
// run, whose output is whole, and draws it in place, display items in their order.
import { state } from "/js/state.js";
import { el } from "/js/dom.js";
import { api, guard } from "/js/api.js";

const SHOWN = 16 << 10;
const ELLIPSIS = new TextEncoder().encode("\n…");

// clipOutput is the part of one stream's bytes the cell draws.
export function clipOutput(cell, bytes) {
  if (cell.showAll || bytes.length <= SHOWN) return bytes;
  const out = new Uint8Array(SHOWN + ELLIPSIS.length);
  out.set(bytes.subarray(0, SHOWN));
  out.set(ELLIPSIS, SHOWN);
  return out;
}

// Runs shown whole, by execution id: a cell drawn again (the history reloaded after a
// reconnect, a later record of the run) goes on showing all of it. The last few only.
const whole = new Map();
const WHOLE_KEPT = 20;

function keepWhole(id, run) {
  whole.delete(id);
  whole.set(id, run);
  if (whole.size > WHOLE_KEPT) whole.delete(whole.keys().next().value);
}

// shownWhole is the stored run a cell shows all of, if it does.
export function shownWhole(cell) {
  return cell.showAll ? whole.get(cell.dataset.execution) : undefined;
}

// showWhole draws run whole in every cell of the page that shows it clipped.
function showWhole(id, run) {
  for (const c of document.querySelectorAll(`#messages .cell[data-execution="${CSS.escape(id)}"]`)) {
    if (c.showAll || !c.drawAll) continue;
    c.showAll = true;
    c.drawAll(run);
    c.querySelector(":scope > .cell-more")?.remove();
  }
}

// offerShowAll puts "Show all" under a cell whose run printed more than it shows;
// draw lays the fetched run out.
export function offerShowAll(cell, r, draw) {
  cell.querySelector(":scope > .cell-more")?.remove();
  if (!r.execution_id) return;
  const id = String(r.execution_id);
  cell.dataset.execution = id;
  cell.drawAll = draw;
  if (whole.has(id)) {
    if (!cell.showAll) {
      cell.showAll = true;
      draw(whole.get(id));
    }
    return;
  }
  const long = !!r.truncated || (r.stdout || "").length > SHOWN || (r.stderr || "").length > SHOWN;
  if (cell.showAll || !long) return;
  const show = el("button", { type: "button", textContent: "Show all" });
  const more = el("p", { className: "cell-more" }, el("span", { className: "hint", textContent: "Only the first 16 KiB of each output is shown. " }), show);
  show.onclick = () => guard(async () => {
    const conv = state.conv;
    show.disabled = true;
    try {
      const run = await api("GET", `/conversations/${conv.id}/sandbox/executions/${id}`);
      if (state.conv?.id !== conv.id) return;
      keepWhole(id, run);
      // The cell may have been drawn again while the run was fetched: the one on the
      // page now shows it.
      showWhole(id, run);
      const now = cell.isConnected ? cell : document.querySelector(`#messages .cell[data-execution="${CSS.escape(id)}"]`);
      now?.querySelector(".out-wrap .copy")?.focus(); // where the focus was is gone
    } finally { show.disabled = false; }
  });
  cell.querySelector(":scope > .out-wrap").after(more);
}
