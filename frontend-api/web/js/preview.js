// Preview: an attachment read as a table — its first rows, its sheets as tabs, each
// column's type under its name — from GET …/files/{id}/preview, the same reading the
// data analysis tool gives the model. Cells are text, never markup: a CSV cell that says
// =HYPERLINK(…) shows as those characters.
import { state } from "/js/state.js";
import { el } from "/js/dom.js";
import { api, guard } from "/js/api.js";

const TABLE = /\.(csv|tsv|tab|jsonl|ndjson|xlsx|xlsm)$/i;

// previewButton offers the preview of f when its name says it is a table; null otherwise.
export function previewButton(f, className = "chip-preview") {
  if (!TABLE.test(f.name)) return null;
  return el("button", {
    type: "button", className, textContent: "Preview", title: `Preview ${f.name} as a table`,
    attrs: { "aria-label": `Preview ${f.name}` }, onclick: () => guard(() => openPreview(f)),
  });
}

// The dialog is built on first use, so the static page (and its captured ids) stays as it is.
let dialog;
function view() {
  if (dialog) return dialog;
  const title = el("h2", { className: "preview-title" });
  const close = el("button", { type: "button", className: "close", textContent: "✕", attrs: { "aria-label": "Close" }, onclick: () => dialog.close() });
  const tabs = el("div", { className: "preview-tabs", attrs: { role: "tablist", "aria-label": "Sheets" } });
  const info = el("p", { className: "preview-info" });
  const body = el("div", { className: "preview-body", attrs: { role: "tabpanel", tabindex: 0 } });
  dialog = el("dialog", { className: "preview" }, el("header", {}, title, close), tabs, info, body);
  Object.assign(dialog, { parts: { title, tabs, info, body } });
  document.body.append(dialog);
  return dialog;
}

export async function openPreview(f, sheet = "") {
  const conv = state.conv;
  const q = sheet ? `?sheet=${encodeURIComponent(sheet)}` : "";
  const t = await api("GET", `/conversations/${conv.id}/files/${f.id}/preview${q}`);
  if (state.conv?.id !== conv.id) return;
  const d = view();
  draw(d, f, t);
  if (!d.open) d.showModal();
}

function draw(d, f, t) {
  const { title, tabs, info, body } = d.parts;
  const sh = t.sheets[0] || { columns: [], data: [], rows: 0, column_count: 0 };
  title.textContent = f.name;
  d.setAttribute("aria-label", `Preview of ${f.name}`);
  const names = t.sheet_names || [];
  tabs.hidden = names.length < 2;
  tabs.replaceChildren(...names.map((n) => el("button", {
    type: "button", textContent: n,
    attrs: { role: "tab", "aria-selected": String(n === sh.name) },
    onclick: () => guard(() => openPreview(f, n)),
  })));
  const how = [t.format.toUpperCase(), t.encoding, t.delimiter && `delimiter ${t.delimiter === "\t" ? "tab" : JSON.stringify(t.delimiter)}`].filter(Boolean).join(", ");
  const shown = sh.data.length < sh.rows ? `the first ${sh.data.length} shown` : "all shown";
  info.textContent = `${sh.rows} rows × ${sh.column_count} columns (${shown}) · ${how}`;
  const head = el("tr", {}, ...sh.columns.map((c) => el("th", { scope: "col", title: `${c.name}: ${c.type}, ${c.nulls} empty` }, c.name, el("small", { className: "preview-type", textContent: c.type }))));
  const rows = sh.data.map((r) => el("tr", {}, ...sh.columns.map((_, i) => el("td", { textContent: r[i] ?? "" }))));
  body.replaceChildren(el("table", { className: "preview-table" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  for (const n of sh.notes || []) body.append(el("p", { className: "preview-note", textContent: n }));
}

// dataResult draws a describe_file or preview_rows result in the conversation: its
// summary, and Preview for the file. Drawn once per tool message.
export function dataResult(box, m, r, call) {
  if (box.querySelector(`:scope > [data-result="${m.id}"]`)) return;
  const name = r.file || call?.arguments?.file || "";
  box.append(el("li", { className: "data-result", dataset: { result: String(m.id) } },
    el("div", { className: "who" }, `Data analysis · ${name}`, " ", r.status === "ok" && r.file_id ? previewButton({ id: r.file_id, name }) : null),
    el("pre", { className: "data-summary", textContent: r.summary || r.message || "" })));
}
