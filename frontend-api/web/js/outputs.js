// A finished cell's printed output. Up to 16 KiB of it is drawn (what an event carries);
// past that the cell says so and offers "Show all", which fetches the stored run, whose
// output is whole, and draws it.
import { state } from "/js/state.js";
import { el } from "/js/dom.js";
import { api, guard } from "/js/api.js";

const SHOWN = 16 << 10;

function spans(cell, stdout, stderr) {
  cell.outEl.replaceChildren();
  if (stdout) cell.outEl.append(el("span", { className: "stdout", textContent: stdout }));
  if (stderr) cell.outEl.append(el("span", { className: "stderr", textContent: stderr }));
  cell.outEl.hidden = !cell.outEl.childNodes.length;
}

function clip(s) { return s.length > SHOWN ? s.slice(0, SHOWN) + "\n…" : s; }

// drawOutput replaces what streamed with the run's final output: complete and in order.
export function drawOutput(cell, r) {
  const stdout = r.stdout || "", stderr = r.stderr || "";
  const long = !!r.truncated || stdout.length > SHOWN || stderr.length > SHOWN;
  spans(cell, clip(stdout), clip(stderr));
  cell.querySelector(":scope > .cell-more")?.remove();
  if (!long || !r.execution_id) return;
  const show = el("button", { type: "button", textContent: "Show all" });
  const more = el("p", { className: "cell-more" }, el("span", { className: "hint", textContent: "Only the first 16 KiB of each output is shown. " }), show);
  show.onclick = () => guard(async () => {
    const conv = state.conv;
    show.disabled = true;
    try {
      const run = await api("GET", `/conversations/${conv.id}/sandbox/executions/${r.execution_id}`);
      if (state.conv !== conv || !cell.isConnected) return;
      spans(cell, run.stdout || "", run.stderr || "");
      more.remove();
      cell.querySelector(".out-wrap .copy")?.focus(); // where the focus was is gone
    } finally { show.disabled = false; }
  });
  cell.outEl.closest(".out-wrap").after(more);
}
