// The page's own elements, element building, toasts, and the sanitizer every piece of
// content from users, models and Python goes through.
import { marked } from "/vendor/marked-18.2.1.esm.js";
import DOMPurify from "/vendor/dompurify-3.4.18.es.mjs";
import hljs from "/vendor/highlight-11.12.0.core.min.js";
import python from "/vendor/highlight-11.12.0.python.min.js";

hljs.registerLanguage("python", python);
marked.setOptions({ gfm: true, breaks: false });

// LaTeX in Markdown: $…$ inline, $$…$$ on its own. Math is marked as a span or div of
// its TeX, which goes through the sanitizer as text, and is then drawn by the vendored
// KaTeX as MathML (no styles, no fonts to load: the browser draws it). "$5 and $10"
// stays text: inline math neither starts nor ends with a space, nor ends before a digit,
// and holds no backtick (a code span after a price is code).
const escapeHTML = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
marked.use({
  extensions: [
    {
      name: "mathBlock", level: "block",
      start: (src) => src.match(/^ {0,3}\$\$/m)?.index,
      tokenizer(src) {
        const m = /^ {0,3}\$\$([\s\S]+?)\$\$ *(?:\n+|$)/.exec(src);
        if (m) return { type: "mathBlock", raw: m[0], tex: m[1].trim() };
      },
      renderer: (t) => `<div class="math-display">${escapeHTML(t.tex)}</div>\n`,
    },
    {
      name: "mathInline", level: "inline",
      start: (src) => src.indexOf("$") < 0 ? undefined : src.indexOf("$"),
      tokenizer(src) {
        const m = /^\$\$([^$`]+?)\$\$|^\$(?![\s$])((?:\\.|[^\\\n$`])*?[^\\\s$`])\$(?!\d)/.exec(src);
        if (m) return { type: "mathInline", raw: m[0], tex: (m[1] ?? m[2]).trim(), display: m[1] !== undefined };
      },
      renderer: (t) => `<span class="${t.display ? "math-display" : "math-inline"}">${escapeHTML(t.tex)}</span>`,
    },
  ],
});

let katex = null;
// drawMath draws the math marked in root, once KaTeX is loaded (the first time it is
// needed): each as MathML, an error as its TeX in red.
export function drawMath(root) {
  const found = [...root.querySelectorAll(".math-inline, .math-display")].filter((m) => !m.dataset.drawn);
  if (!found.length) return;
  katex ??= import("/vendor/katex-0.19.1.mjs").then((m) => m.default);
  katex.then((k) => found.forEach((m) => {
    const tex = m.textContent;
    m.dataset.drawn = "1";
    m.title = tex;
    // KaTeX's own error box is styled by a style attribute, which the page's CSP refuses.
    try { k.render(tex, m, { displayMode: m.classList.contains("math-display"), output: "mathml", throwOnError: true }); } catch { m.classList.add("math-error"); }
  }));
}

// mathBox is a display item's LaTeX ("$$…$$", "$…$", "\[…\]" or bare), drawn as math.
export function mathBox(latex) {
  const t = latex.trim(), m = /^\$\$([\s\S]*)\$\$$|^\$([\s\S]*)\$$|^\\\[([\s\S]*)\\\]$/.exec(t);
  const box = el("div", { className: "display-math" }, el("div", { className: "math-display", textContent: m ? (m[1] ?? m[2] ?? m[3]).trim() : t }));
  drawMath(box);
  return box;
}

// The page's own elements, taken from the static page once, before anything from a
// message or a run is drawn: an element of theirs with the same id can never stand in
// for one of these (the module runs after the document is parsed).
const controls = new Map([...document.querySelectorAll("[id]")].map((e) => [e.id, e]));
export function $(id) {
  const e = controls.get(id);
  if (!e) throw new Error(`no element #${id} in the page`);
  return e;
}

// el builds an element: props are DOM properties, except `attrs`, `dataset` and `on*`
// handlers, which are applied the way the DOM expects.
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    if (k === "attrs") for (const [a, av] of Object.entries(v)) { if (av !== undefined && av !== null && av !== false) e.setAttribute(a, av === true ? "" : String(av)); }
    else if (k === "dataset") { for (const [d, dv] of Object.entries(v)) if (dv !== undefined && dv !== null) e.dataset[d] = String(dv); }
    else if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else e[k] = v;
  }
  e.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

// toast shows message, and detail (when given) as a second line under it.
export function toast(message, level = "success", detail = "") {
  const t = el("div", { className: "toast " + level, attrs: { role: level === "error" ? "alert" : null } },
    message, detail ? el("small", { className: "toast-detail", textContent: detail }) : null);
  $("toasts").append(t);
  setTimeout(() => t.remove(), level === "error" ? 6000 : 3000);
}

// Chat messages (a member's or a model's Markdown) and display items (display(), a
// cell's rich result, figures: untrusted Python) are written by someone other than the
// reader. Their HTML, Markdown and SVG-in-HTML go through one DOMPurify instance,
// stricter than DOMPurify's defaults:
// - no <script>, no event handlers, no javascript: URLs (DOMPurify's defaults);
// - no <style> and no style attributes: CSS can load resources (url(), @import) and
//   restyle the whole page; the page's CSP (style-src 'self') would refuse them anyway
//   and report each refusal as an error;
// - nothing that loads or embeds: frames, objects, media, forms and their controls,
//   <link>, <meta>, <base>; src only as a data: raster image; srcset, poster, background
//   and any url() that is not a reference inside the item are removed;
// - links keep http(s), mailto and #fragments, open in a new tab, without a referrer;
// - ids and names get DOMPurify's "user-content-" prefix and data-* attributes are
//   removed, so nothing drawn can pass for one of the page's elements, to the browser
//   (a <label for>, aria-controls, form submission) or to the page's own look-ups
//   (data-msg, data-call);
// - no forms and no controls: a message cannot offer a box that looks like the composer.
// A rendered display item also sits in a box with CSS containment, so nothing in it can
// be positioned over the rest of the page.
const contentPurify = DOMPurify(window);
const CONTENT_PURIFY = {
  FORBID_TAGS: ["style", "link", "meta", "base", "iframe", "frame", "frameset", "object", "embed", "applet", "portal",
    "form", "input", "button", "textarea", "select", "option", "video", "audio", "source", "track", "picture", "dialog", "template"],
  FORBID_ATTR: ["style", "srcset", "poster", "background", "action", "formaction", "ping", "autofocus", "tabindex"],
  ALLOW_DATA_ATTR: false,
  SANITIZE_NAMED_PROPS: true,
};
const RASTER_DATA_URL = /^data:image\/(png|jpeg|gif|webp);base64,[a-z0-9+/=\s]*$/i;
const EXTERNAL_URL_REF = /url\s*\(\s*['"]?\s*(?!#)/i;
contentPurify.addHook("afterSanitizeAttributes", (node) => {
  for (const attr of [...node.attributes]) {
    const name = attr.name.toLowerCase();
    const value = attr.value.trim();
    if (name === "src") {
      if (!(node.tagName === "IMG" && RASTER_DATA_URL.test(value))) node.removeAttribute(attr.name);
    } else if (name === "href" || name === "xlink:href") {
      if (node.tagName === "A" && /^(https?:|mailto:|#)/i.test(value)) continue;
      if (node.tagName !== "A" && value.startsWith("#")) continue; // <use href="#shape">
      node.removeAttribute(attr.name);
    } else if (EXTERNAL_URL_REF.test(value)) node.removeAttribute(attr.name); // fill="url(https://…)"
  }
  if (node.tagName === "A" && node.hasAttribute("href") && !node.getAttribute("href").startsWith("#")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function sanitize(html) { return contentPurify.sanitize(html, CONTENT_PURIFY); }

export function markdown(text) {
  const div = el("div", { className: "md" });
  div.innerHTML = sanitize(marked.parse(text || ""));
  div.querySelectorAll("pre code").forEach((c) => {
    if (/language-(python|py)\b/.test(c.className)) { c.className = "language-python"; hljs.highlightElement(c); }
  });
  drawMath(div);
  // Each code block gets a Copy button of the page's own, next to it.
  div.querySelectorAll("pre").forEach((pre) => {
    const wrap = el("div", { className: "code-wrap" });
    pre.replaceWith(wrap);
    wrap.append(pre, copyButton("Copy code", () => pre.textContent));
  });
  return div;
}

// copyButton copies what text() returns, and says so on itself for a moment.
export function copyButton(label, text) {
  const b = el("button", { type: "button", className: "copy", textContent: "Copy", attrs: { "aria-label": label } });
  b.onclick = async () => {
    try {
      await navigator.clipboard.writeText(text());
      b.textContent = "Copied";
      setTimeout(() => { b.textContent = "Copy"; }, 1500);
    } catch {
      toast("The browser did not let the page copy; select the text and copy it instead.", "error");
    }
  };
  return b;
}

export function codeBlock(code) {
  const c = el("code", { className: "language-python", textContent: code });
  hljs.highlightElement(c);
  return el("div", { className: "code-wrap" }, el("pre", { className: "code" }, c), copyButton("Copy code", () => code));
}

// On a touch screen Enter is a new line, as its keyboard shows it, and Send sends.
export function enterSends() { return !matchMedia("(pointer: coarse)").matches; }
