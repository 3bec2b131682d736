// A conversation's files: downloads, thumbnails, the attachments above the message box
// and the Files panel.
import { state } from "/js/state.js";
import { $, el, toast } from "/js/dom.js";
import { APIError, api, authHeaders, guard, quiet } from "/js/api.js";
import { previewButton } from "/js/preview.js";

// formatSize writes a size in the unit it reads best in: 66 B, 1.5 KiB, 2 MiB.
function formatSize(n) {
  const one = (v, unit) => `${v.toFixed(1).replace(/\.0$/, "")} ${unit}`;
  return n < 1024 ? `${n} B` : n < 1 << 20 ? one(n / 1024, "KiB") : n < 1 << 30 ? one(n / (1 << 20), "MiB") : one(n / (1 << 30), "GiB");
}

// about prefixes a message with the file it is about, unless it already names it.
function about(name, message) { return message.includes(name) ? message : `${name}: ${message}`; }

// Files are fetched with the page's credentials (a token in a header, or the session
// cookie) and shown from blob: URLs, so no token ever sits in an address, a history
// entry or a log.
// One fetch per file however many elements show it; the URLs live until the list is
// redrawn (releaseBlobs).
export function fileURL(id) {
  if (!state.blobs.has(id)) {
    const p = (async () => {
      const res = await fetch(`/api/v1/files/${id}`, { headers: authHeaders() });
      if (!res.ok) throw new Error(res.status === 404 ? "That file no longer exists." : `Download failed (${res.status}).`);
      return URL.createObjectURL(await res.blob());
    })();
    p.catch(() => state.blobs.get(id) === p && state.blobs.delete(id)); // a failure is not kept
    state.blobs.set(id, p);
  }
  return state.blobs.get(id);
}

// imageFrom gives img the file's URL once it is fetched, unless the URLs were released
// meanwhile (another conversation opened, the page redrawn): a released URL only fails
// to load. It returns the URL's promise.
export function imageFrom(img, id, unavailable) {
  const p = fileURL(id);
  p.then((u) => { if (state.blobs.get(id) === p) img.src = u; }, unavailable);
  return p;
}

export function releaseBlobs() {
  for (const p of state.blobs.values()) p.then((u) => URL.revokeObjectURL(u), () => {});
  state.blobs.clear();
  $("messages").querySelectorAll(".cell[data-call]").forEach((c) => { for (const u of c.displayURLs || []) URL.revokeObjectURL(u); c.displayURLs = []; });
}

export function thumbnail(f) {
  const img = el("img", { alt: f.name });
  const button = el("button", { type: "button", className: "thumb", title: `${f.name} — open full size`, attrs: { "aria-label": `Open ${f.name} full size` } }, img);
  imageFrom(img, f.id, () => { img.alt = `${f.name} (unavailable)`; });
  button.onclick = () => guard(() => openViewer(f));
  return el("figure", {}, button, el("figcaption", {}, downloadChip(f)));
}

// openViewer shows an image file of the conversation full size.
export async function openViewer(f) {
  $("viewer-img").src = await fileURL(f.id);
  $("viewer-img").alt = f.name;
  $("viewer-name").textContent = f.name;
  $("viewer").showModal();
}

export function downloadChip(f) {
  return el("button", {
    type: "button", className: "chip", title: `Download ${f.name}`, attrs: { "aria-label": `Download ${f.name}` },
    onclick: () => guard(() => download(f)),
  }, "↓ ", f.name, el("small", { textContent: ` ${formatSize(f.size || 0)}` }));
}

function canEdit() { return !!state.conv && state.conv.role !== "viewer"; }

// renderFiles draws the conversation's files twice: its uploads as chips above the
// message box (what Python finds under /data) and every file in the Files panel.
export function renderFiles(files) {
  state.files = files;
  renderAttachments(kept().filter((f) => f.source === "upload"));
  renderFilesPanel();
}

// An upload removed from the message box is deleted only when the toast that offers to
// undo it goes, or when the page is left: a slip of the × costs nothing. Until then it
// is drawn nowhere, however often the list is fetched again.
const UNDO_MS = 6000;
const removing = new Map(); // file id → { f, headers, toast, timer }

function kept() { return (state.files || []).filter((f) => !removing.has(f.id)); }

function removeUpload(f) {
  const row = $("attachments").querySelector(`[data-file="${f.id}"]`);
  const next = row?.nextElementSibling?.querySelector(".chip-remove") || row?.previousElementSibling?.querySelector(".chip-remove");
  const undo = el("button", { type: "button", className: "toast-action", textContent: "Undo", attrs: { "aria-label": `Undo deleting ${f.name}` }, onclick: () => restore(f.id) });
  const t = el("div", { className: "toast success" }, `Deleted ${f.name}`, " ", undo);
  // The credentials of who removed it: the delete is theirs even if they sign out
  // meanwhile (with a token; a session ended by signing out deletes nothing more).
  removing.set(f.id, { f, headers: authHeaders("DELETE"), toast: t, timer: setTimeout(() => purge(f.id), UNDO_MS) });
  $("toasts").append(t);
  renderFiles(state.files);
  (next || $("input")).focus();
}

function restore(id) {
  const r = removing.get(id);
  if (!r) return;
  clearTimeout(r.timer);
  r.toast.remove();
  removing.delete(id);
  renderFiles(state.files);
  $("attachments").querySelector(`[data-file="${id}"] .chip-remove`)?.focus();
}

// purge sends the delete. When the page is being left it goes with keepalive, which
// outlives the page; nobody is there to read its answer.
function purge(id, leaving = false) {
  const r = removing.get(id);
  if (!r) return;
  clearTimeout(r.timer);
  r.toast.remove();
  removing.delete(id);
  state.files = (state.files || []).filter((x) => x.id !== id);
  const sent = fetch(`/api/v1/files/${id}`, { method: "DELETE", headers: r.headers, keepalive: leaving });
  if (leaving) return;
  sent.then(async (res) => {
    if (res.ok || res.status === 404) return;
    const p = await res.json().catch(() => null);
    toast(about(r.f.name, p?.detail || `not deleted (${res.status})`), "error");
    touchFiles();
  }, () => { toast(about(r.f.name, "not deleted: the server could not be reached"), "error"); touchFiles(); });
}

addEventListener("pagehide", () => { for (const id of [...removing.keys()]) purge(id, true); });

function renderAttachments(files) {
  $("attachments").replaceChildren(...files.map((f) => el("li", { className: "chip-row", dataset: { file: String(f.id) } },
    downloadChip(f),
    previewButton(f),
    canEdit() ? el("button", {
      type: "button", className: "chip-remove", attrs: { "aria-label": `Remove ${f.name}` }, textContent: "×",
      onclick: () => removeUpload(f),
    }) : null)));
}

function renderFilesPanel() {
  const files = kept();
  $("files-count").textContent = files.length ? `(${files.length})` : "";
  $("files-tools").hidden = !canEdit();
  const focused = $("files-list").contains(document.activeElement) ? document.activeElement.closest("[data-file]")?.dataset.file : null;
  if (!files.length) { $("files-list").replaceChildren(el("li", { className: "empty", textContent: "No files yet." })); return; }
  $("files-list").replaceChildren(...files.map((f) => el("li", { className: "file", dataset: { file: String(f.id) } },
    el("button", { type: "button", className: "file-name", title: `Download ${f.name}`, attrs: { "aria-label": `Download ${f.name}` }, onclick: () => guard(() => download(f)) }, f.name),
    previewButton(f, "file-preview"),
    el("small", { textContent: `${f.source === "upload" ? "upload" : "from Python"} · ${formatSize(f.size || 0)}` }),
    canEdit() ? el("button", { type: "button", className: "danger", textContent: "Delete", attrs: { "aria-label": `Delete ${f.name}` }, onclick: () => guard(() => deleteFile(f)) }) : null)));
  // A redraw under the keyboard keeps its place.
  if (focused) $("files-list").querySelector(`[data-file="${focused}"] button`)?.focus();
  if (!$("files-panel").hidden) showStorage();
}

// showStorage writes what the conversation holds against its quota (uploads, files from
// Python and Python's state together); a failure leaves the line empty.
function showStorage() {
  const conv = state.conv;
  if (!conv) return;
  api("GET", `/conversations/${conv.id}/storage`).then(
    (s) => { if (state.conv?.id === conv.id) $("files-storage").textContent = `Storage: ${formatSize(s.used)} of ${formatSize(s.quota)}`; },
    () => { if (state.conv?.id === conv.id) $("files-storage").textContent = ""; });
}

async function refreshFiles() {
  const conv = state.conv;
  if (!conv) return;
  const files = await api("GET", `/conversations/${conv.id}/files`);
  if (state.conv?.id === conv.id) renderFiles(files);
}

let filesTimer;
export function touchFiles() {
  clearTimeout(filesTimer);
  filesTimer = setTimeout(() => quiet(refreshFiles), 300);
}

async function deleteFile(f) {
  $("files-error").textContent = "";
  try { await api("DELETE", `/files/${f.id}`); } catch (e) {
    if (!$("files-panel").hidden) $("files-error").textContent = about(f.name, e.message);
    throw e;
  }
  renderFiles((state.files || []).filter((x) => x.id !== f.id));
  toast(`Deleted ${f.name}`);
  if (!$("files-panel").hidden) ($("files-list").querySelector("button") || $("files-close")).focus();
}

export async function download(f) {
  const a = el("a", { href: await fileURL(f.id), download: f.name.split("/").pop() });
  document.body.append(a);
  a.click();
  a.remove();
}

// Each file is sent on its own; one refused (too large, over the quota) does not stop
// the others, and the server's reason is shown as it gave it.
export async function uploadFiles(files) {
  const conv = state.conv;
  const failed = [];
  $("files-error").textContent = "";
  for (const file of files) {
    const form = new FormData();
    form.append("file", file, file.name);
    const pending = el("li", { className: "chip-row uploading" }, el("span", { className: "chip", textContent: `Uploading ${file.name}…` }));
    $("attachments").append(pending);
    try {
      await api("POST", `/conversations/${conv.id}/files`, form);
    } catch (e) {
      if (e instanceof APIError && e.status === 401) throw e;
      failed.push(about(file.name, e.message));
    } finally { pending.remove(); }
  }
  await refreshFiles();
  if (state.conv?.id !== conv.id) return;
  if (failed.length) {
    $("files-error").textContent = failed.join("\n");
    failed.forEach((m) => toast(m, "error"));
  }
  const stored = files.length - failed.length;
  if (stored) toast(stored === 1 && files.length === 1 ? `${files[0].name} is under /data for Python` : `${stored} files are under /data for Python`);
}

export function openFiles() {
  $("files-panel").hidden = false;
  $("files-button").setAttribute("aria-expanded", "true");
  $("files-error").textContent = "";
  guard(refreshFiles);
  ($("files-list").querySelector("button") || $("files-close")).focus();
}

export function closeFiles(returnFocus = true) {
  if ($("files-panel").hidden) return;
  $("files-panel").hidden = true;
  $("files-button").setAttribute("aria-expanded", "false");
  if (returnFocus) $("files-button").focus();
}
