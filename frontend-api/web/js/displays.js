// Display items of a run: what each shows, and the frames that hold interactive ones.
import { marked } from "/vendor/marked-18.2.1.esm.js";
import { $, el, sanitize, drawMath, mathBox } from "/js/dom.js";
import { guard } from "/js/api.js";
import { imageFrom, openViewer } from "/js/files.js";

// HTML that only shows as meant with its scripts or styles (charts, styled tables) is
// drawn in a frame of its own; other HTML is sanitized and drawn in the page.
const NEEDS_FRAME = /<(script|style|link|iframe|object|embed|canvas)\b|\s(style|on[a-z]+)\s*=/i;

// A frame is as tall as its content says, within bounds: what runs there may say
// anything.
const FRAME_MIN = 24, FRAME_MAX = 1200;
addEventListener("message", (e) => {
  if (!e.data || e.data.type !== "sandchat.height") return;
  const frame = [...document.querySelectorAll("iframe.display-frame")].find((f) => f.contentWindow === e.source);
  const h = Number(e.data.height);
  if (frame && Number.isFinite(h)) frame.style.height = `${Math.min(FRAME_MAX, Math.max(FRAME_MIN, Math.ceil(h)))}px`;
});

// dark tells whether the page is drawn dark: by the Theme setting (js/theme.js), else
// by the system's preference.
function dark() {
  const t = document.documentElement.dataset.theme;
  return t ? t === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
}

// Frames draw their item's text and tables in the page's theme; they are told when it
// changes.
function tellTheme() {
  const theme = dark() ? "dark" : "light";
  for (const f of document.querySelectorAll("iframe.display-frame")) f.contentWindow?.postMessage({ type: "sandchat.theme", theme }, "*");
}
addEventListener("sandchat:theme", tellTheme);
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", tellTheme);

// displayFrame holds an item's HTML or Plotly figure in a sandboxed frame: scripts run
// there under an opaque origin (no page, no token, no cookies) and, by the frame
// document's policy, without network. The item is handed over once the frame loaded.
function displayFrame(d, label) {
  const frame = el("iframe", {
    className: "display-frame", src: "/frame.html", title: label,
    attrs: { sandbox: "allow-scripts", referrerpolicy: "no-referrer", loading: "lazy" },
  });
  const item = d.plotly ? { plotly: typeof d.plotly === "string" ? JSON.parse(d.plotly) : d.plotly } : { html: d.html };
  // What it holds: a frame drawn again with the same is the same frame (keptFrame).
  frame.itemKey = JSON.stringify(item);
  frame.addEventListener("load", () => frame.contentWindow?.postMessage({ type: "sandchat.display", theme: dark() ? "dark" : "light", ...item }, "*"), { once: true });
  return frame;
}

function sanitizedBox(className, html) {
  const box = el("div", { className: "display-html " + className });
  box.innerHTML = sanitize(html);
  return box;
}

// Download is a link to the image's bytes, so the browser's own ways to save a link work
// too; it becomes one when those bytes are here (href, a promise of a URL).
function imageActions(name, open, href) {
  const save = el("a", { className: "link", textContent: "Download", download: name.split("/").pop(), attrs: { "aria-label": `Download ${name}` } });
  href.then((u) => { save.href = u; }, () => {});
  return el("div", { className: "display-actions" },
    el("button", { type: "button", className: "link", textContent: "Open", attrs: { "aria-label": `Open ${name}` }, onclick: () => guard(open) }),
    save);
}

// What an item shows: the richest part the page can render safely, as Jupyter does.
function displayBody(d, cell, index) {
  if (d.plotly) return displayFrame(d, `Display ${index + 1}: interactive chart`);
  if (d.html) return NEEDS_FRAME.test(d.html) ? displayFrame(d, `Display ${index + 1}: interactive HTML`) : sanitizedBox("html", d.html);
  if (d.markdown) { const box = sanitizedBox("md", marked.parse(d.markdown)); drawMath(box); return box; }
  if (d.svg) {
    // An SVG is shown as an image: in an <img> it runs no script and loads nothing.
    const url = URL.createObjectURL(new Blob([d.svg], { type: "image/svg+xml" }));
    cell.displayURLs.push(url);
    const name = `display-${index + 1}.svg`;
    const openSVG = () => showImage(url, name);
    return el("div", { className: "display-figure" },
      el("img", { className: "display-svg", src: url, alt: d.text && d.text !== "<display>" ? d.text : "SVG image" }),
      imageActions(name, openSVG, Promise.resolve(url)));
  }
  if (d.image) return displayImage(d.image);
  if (d.latex) return mathBox(d.latex);
  if (d.json !== undefined && d.json !== null) {
    let text;
    try { text = JSON.stringify(typeof d.json === "string" ? JSON.parse(d.json) : d.json, null, 2); } catch { text = String(d.json); }
    return el("pre", { className: "display-text json", textContent: text });
  }
  return el("pre", { className: "display-text", textContent: d.text || "" });
}

function showImage(src, name) {
  $("viewer-img").src = src;
  $("viewer-img").alt = name;
  $("viewer-name").textContent = name;
  $("viewer").showModal();
}

// drawAt gives an image the size its code asked for (IPython's Image(width=…,
// height=…)), within the width of the page: a width keeps the asked shape, or the
// image's own; a height alone is kept as is.
function drawAt(e, img) {
  const dw = img.draw_width, dh = img.draw_height;
  if (dw) {
    e.style.width = `${dw}px`;
    e.style.height = "auto";
    if (dh) e.style.aspectRatio = `${dw} / ${dh}`;
  } else if (dh) {
    e.style.height = `${dh}px`;
    e.style.width = "auto";
  }
}

// An image is a file of the conversation once its run is stored: it is fetched with the
// token (an <img src> cannot send it), and can be opened full size or downloaded. While
// the run streams it has no file yet, and a box of its size holds its place.
function displayImage(img) {
  const w = img.width || undefined, h = img.height || undefined;
  if (!img.file_id) {
    const box = el("div", { className: "display-pending", attrs: { role: "img", "aria-label": `${img.name}, ${w}×${h}, loading` }, textContent: `${img.name} · ${w}×${h}` });
    const dw = img.draw_width || w, dh = img.draw_height || (img.draw_width && w && h ? Math.round(img.draw_width * h / w) : h);
    if (dw && dh && dw >= 160) { box.style.aspectRatio = `${dw} / ${dh}`; box.style.width = `min(${dw}px, 100%)`; }
    return box;
  }
  const i = el("img", { className: "display-image", alt: img.name, width: w, height: h, dataset: { file: String(img.file_id) } });
  drawAt(i, img);
  const url = imageFrom(i, img.file_id, () => { i.alt = `${img.name} (unavailable)`; });
  const f = { id: img.file_id, name: img.name, size: img.size };
  return el("div", { className: "display-figure" }, i, imageActions(img.name, () => openViewer(f), url));
}

function label(d) {
  return d.plotly ? "interactive chart" : d.html ? "HTML" : d.markdown ? "Markdown" : d.svg ? "SVG image" : d.image ? "image" : d.latex ? "LaTeX" : d.json !== undefined && d.json !== null ? "JSON" : "text";
}

export function displayEl(d, cell, index) {
  return el("div", { className: "display", dataset: { index: String(index), kind: d.kind || "display", displayId: d.id || undefined }, attrs: { role: "group", "aria-label": `Display ${index + 1}: ${label(d)}` } },
    displayBody(d, cell, index),
    d.truncated ? el("p", { className: "hint", textContent: "Too large to show here in full." }) : null);
}

// keptFrame is the element old, drawn while the run streamed, when it holds the same
// frame as fresh, drawn from the finished run: the frame goes on as it was (what the
// reader did in it stays), and fresh is never loaded.
export function keptFrame(old, fresh) {
  const a = old?.querySelector(":scope > iframe.display-frame"), b = fresh.querySelector(":scope > iframe.display-frame");
  return a && b && a.itemKey === b.itemKey ? old : fresh;
}
