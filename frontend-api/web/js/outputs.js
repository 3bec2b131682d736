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

// offerShowAll puts "Show all" under a cell whose run printed more than it shows;
// draw lays the fetched run out.
export function offerShowAll(cell, r, draw) {
  cell.querySelector(":scope > .cell-more")?.remove();
  const long = !!r.truncated || (r.stdout || "").length > SHOWN || (r.stderr || "").length > SHOWN;
  if (cell.showAll || !long || !r.execution_id) return;
  const show = el("button", { type: "button", textContent: "Show all" });
  const more = el("p", { className: "cell-more" }, el("span", { className: "hint", textContent: "Only the first 16 KiB of each output is shown. " }), show);
  show.onclick = () => guard(async () => {
    const conv = state.conv;
    show.disabled = true;
    try {
      const run = await api("GET", `/conversations/${conv.id}/sandbox/executions/${r.execution_id}`);
      if (state.conv !== conv || !cell.isConnected) return;
      cell.showAll = true;
      draw(run);
      more.remove();
      cell.querySelector(".out-wrap .copy")?.focus(); // where the focus was is gone
    } finally { show.disabled = false; }
  });
  cell.querySelector(":scope > .out-wrap").after(more);
}
