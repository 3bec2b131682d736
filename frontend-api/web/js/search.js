// Searching the conversations: the box above the list asks the server (GET
// /conversations?q=, full-text over titles and messages, only conversations the user
// may view) as the user types, and the list shows the hits, each with the words it
// matched; a hit opens its conversation at the message it matched (#/c/12/m/345).
// Keyboard: "/" goes to the box, ↓ from it to the hits, Escape clears it.
import { state } from "/js/state.js";
import { $, el } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { convTitle, renderConversationList } from "/js/chat.js";
import { setMenu } from "/js/session.js";

// Typing pauses this long before the server is asked.
const PAUSE_MS = 250;

let timer = null;
let asked = 0; // the newest search sent: an older answer that comes later is dropped

export function startSearch() {
  const box = $("search-input");
  $("search").onsubmit = (e) => { e.preventDefault(); clearTimeout(timer); guard(search); };
  box.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => guard(search), PAUSE_MS); });
  box.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && box.value) { e.preventDefault(); e.stopPropagation(); box.value = ""; clear(); }
    else if (e.key === "ArrowDown") { e.preventDefault(); $("convs").querySelector("a")?.focus(); }
  });
  $("convs").addEventListener("keydown", (e) => {
    const links = [...$("convs").querySelectorAll("a")], i = links.indexOf(document.activeElement);
    if (i < 0 || (e.key !== "ArrowDown" && e.key !== "ArrowUp")) return;
    e.preventDefault();
    if (e.key === "ArrowUp" && i === 0 && state.search) box.focus();
    else links[Math.max(0, Math.min(links.length - 1, i + (e.key === "ArrowDown" ? 1 : -1)))].focus();
  });
  addEventListener("hashchange", () => { if (state.search) drawHits(); });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey || !state.me || !$("login-view").hidden) return;
    if (e.target.closest?.("input, textarea, select, [contenteditable]")) return;
    e.preventDefault();
    if ($("chat-view").hidden) location.hash = "#/";
    if (getComputedStyle($("menu")).display !== "none") setMenu(true);
    box.focus();
    box.select();
  });
}

// openID is the conversation the address opens (a hit's link may be on its way to open it).
function openID() { return Number(location.hash.match(/^#\/c\/(\d+)/)?.[1]) || null; }

function clear() {
  state.search = null;
  $("search-status").textContent = "";
  renderConversationList();
}

async function search() {
  const q = $("search-input").value.trim();
  const n = ++asked;
  if (!q) return clear();
  const hits = await api("GET", `/conversations?q=${encodeURIComponent(q)}`);
  if (n !== asked || $("search-input").value.trim() !== q) return;
  state.search = { q, hits };
  $("search-status").textContent = hits.length === 1 ? `1 conversation matches “${q}”` : hits.length ? `${hits.length} conversations match “${q}”` : `No conversation matches “${q}”`;
  drawHits();
}

// drawHits draws the list as the search found it: each conversation once, at its best
// match.
export function drawHits() {
  const { q, hits } = state.search;
  const words = q.toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter(Boolean);
  $("convs").replaceChildren(...hits.map((c) => {
    const href = c.match?.message_id ? `#/c/${c.id}/m/${c.match.message_id}` : `#/c/${c.id}`;
    return el("li", {}, el("a", {
      href, className: "nav-item", dataset: { conv: String(c.id) },
      attrs: { "aria-current": openID() === c.id ? "page" : null },
    }, el("span", { className: "nav-title" }, ...marked(convTitle(c), words)),
    c.match?.snippet ? el("span", { className: "snippet" }, ...marked(c.match.snippet, words)) : null));
  }));
}

// marked is text as nodes, each word of the search in it (a word's start, as the
// server matched prefixes) in a <mark>.
function marked(text, words) {
  if (!words.length) return [text];
  const re = new RegExp(`(?<![\\p{L}\\p{N}_])(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`, "giu");
  const out = [];
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    out.push(el("mark", { textContent: m[0] }));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}
