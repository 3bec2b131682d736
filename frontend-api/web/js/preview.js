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
// Its sheets are tabs as the ARIA tabs pattern has them: one tab stop, the arrow keys
// (and Home, End) move between them and show the sheet, and the focus stays on the
// tab through the redraw. Its height is the same for every sheet; Previous and Next
// page through the rows.
let dialog;
function view() {
  if (dialog) return dialog;
  const title = el("h2", { className: "preview-title", id: "preview-title" });
  const close = el("button", { type: "button", className: "close", textContent: "✕", attrs: { "aria-label": "Close" }, onclick: () => dialog.close() });
  const tabs = el("div", { className: "preview-tabs", attrs: { role: "tablist", "aria-labelledby": "preview-title" } });
  const info = el("p", { className: "preview-info" });
  const body = el("div", { className: "preview-body", id: "preview-sheet", attrs: { role: "tabpanel", tabindex: 0 } });
  const prev = el("button", { type: "button", textContent: "‹ Previous", attrs: { "aria-label": "Previous rows" } });
  const next = el("button", { type: "button", textContent: "Next ›", attrs: { "aria-label": "Next rows" } });
  const rows = el("span", { className: "preview-rows", attrs: { "aria-live": "polite" } });
  const pager = el("div", { className: "preview-pager" }, rows, prev, next);
  dialog = el("dialog", { className: "preview", attrs: { "aria-labelledby": "preview-title" } }, el("header", {}, title, close), tabs, info, body, pager);
  Object.assign(dialog, { parts: { title, tabs, info, body, prev, next, rows } });
  tabs.addEventListener("keydown", (e) => {
    const all = [...tabs.querySelectorAll("[role=tab]")];
    const i = all.indexOf(document.activeElement);
    if (i < 0) return;
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: all.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    const tab = all[(to + all.length) % all.length];
    tab.focus();
    tab.click();
  });
  prev.onclick = () => guard(() => page(-1));
  next.onclick = () => guard(() => page(1));
  document.body.append(dialog);
  return dialog;
}

// What the dialog shows: the file, its sheet and the first row shown.
let shown = null;

export async function openPreview(f, sheet = "", offset = 0) {
  const conv = state.conv;
  const q = new URLSearchParams();
  if (sheet) q.set("sheet", sheet);
  if (offset) q.set("offset", String(offset));
  q.set("rows", String(PAGE));
  const t = await api("GET", `/conversations/${conv.id}/files/${f.id}/preview?${q}`);
  if (state.conv?.id !== conv.id) return;
  const d = view();
  const fresh = shown?.f.id !== f.id || !d.open;
  shown = { f, sheet: t.sheets[0]?.name || sheet, offset: t.sheets[0]?.offset ?? offset, rows: t.sheets[0]?.rows ?? 0, t };
  draw(d, f, t, fresh);
  if (!d.open) d.showModal();
}

// Rows a page of the preview holds.
const PAGE = 20;

function page(step) {
  if (!shown) return;
  const offset = Math.max(0, shown.offset + step * PAGE);
  if (offset >= shown.rows && step > 0) return;
  return openPreview(shown.f, shown.sheet, offset);
}

function draw(d, f, t, fresh) {
  const { title, tabs, info, body, prev, next, rows } = d.parts;
  const sh = t.sheets[0] || { columns: [], data: [], rows: 0, column_count: 0, offset: 0 };
  title.textContent = f.name;
  const names = t.sheet_names || [];
  tabs.hidden = names.length < 2;
  if (fresh || tabs.childElementCount !== names.length) {
    // Made once per file: showing another sheet only changes which tab is selected, so
    // the focus stays where the keyboard left it.
    tabs.replaceChildren(...names.map((n, i) => el("button", {
      type: "button", textContent: n, id: `preview-tab-${i}`,
      attrs: { role: "tab", "aria-controls": "preview-sheet" },
      onclick: () => { if (shown?.sheet !== n || shown.f.id !== f.id) guard(() => openPreview(f, n)); },
    })));
  }
  let selected = null;
  for (const tab of tabs.children) {
    const on = tab.textContent === sh.name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    if (on) selected = tab;
  }
  if (selected && !tabs.hidden) body.setAttribute("aria-labelledby", selected.id);
  else body.removeAttribute("aria-labelledby");
  body.setAttribute("aria-label", tabs.hidden ? `Rows of ${f.name}` : `Rows of the sheet ${sh.name}`);
  const how = [t.format.toUpperCase(), t.encoding, t.delimiter && `delimiter ${t.delimiter === "\t" ? "tab" : JSON.stringify(t.delimiter)}`].filter(Boolean).join(", ");
  const count = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;
  info.textContent = `${count(sh.rows, "row")} × ${count(sh.column_count, "column")} · ${how}`;
  const from = sh.offset || 0, to = from + sh.data.length;
  rows.textContent = !sh.rows ? "No rows" : to - from === 1 ? `Row ${to} of ${sh.rows}` : `Rows ${from + 1}–${to} of ${sh.rows}`;
  prev.disabled = from === 0;
  next.disabled = to >= sh.rows;
  // A button that came to an end hands its focus to the other.
  if (document.activeElement === next && next.disabled && !prev.disabled) prev.focus();
  if (document.activeElement === prev && prev.disabled && !next.disabled) next.focus();
  const head = el("tr", {}, ...sh.columns.map((c) => el("th", { scope: "col", title: `${c.name}: ${c.type}, ${c.nulls} empty` }, c.name, el("small", { className: "preview-type", textContent: c.type }))));
  const cells = sh.data.map((r) => el("tr", {}, ...sh.columns.map((_, i) => el("td", { textContent: r[i] ?? "" }))));
  body.replaceChildren(el("table", { className: "preview-table" }, el("thead", {}, head), el("tbody", {}, ...cells)));
  for (const n of sh.notes || []) body.append(el("p", { className: "preview-note", textContent: n }));
  body.scrollTop = 0;
}

// dataResult draws a describe_file or preview_rows result in the conversation: what the
// file is (its format, each sheet's rows and columns) and Preview for it; the whole
// summary the model read (every column, how to load it) is a click away, since the
// answer that follows tells of it. Drawn once per tool message.
export function dataResult(box, m, r, call) {
  if (box.querySelector(`:scope > [data-result="${m.id}"]`)) return;
  const name = r.file || call?.arguments?.file || "";
  const text = r.summary || r.message || "";
  const lines = text.split("\n");
  const head = r.status === "ok" ? lines.filter((l, i) => i === 0 || /\d+ rows × \d+ columns/.test(l)).join("\n") : text;
  box.append(el("li", { className: "data-result", dataset: { result: String(m.id) } },
    el("div", { className: "who" }, `Data analysis · ${name}`, " ", r.status === "ok" && r.file_id ? previewButton({ id: r.file_id, name }) : null),
    el("pre", { className: "data-summary", textContent: head }),
    head !== text ? el("details", { className: "data-details" }, el("summary", { textContent: "Columns and how to load it" }), el("pre", { className: "data-summary", textContent: text })) : null));
}
