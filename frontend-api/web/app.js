// The sandchat web client: conversations with live code cells, the input toolbar with
// its Internal tools popup, agents' Configuration page, and toasts — on the v1 API and
// one WebSocket per tab. Plain ES modules, no build step.
import { marked } from "/vendor/marked-15.0.12.esm.js";
import DOMPurify from "/vendor/dompurify-3.4.18.es.mjs";
import hljs from "/vendor/highlight-11.12.0.core.min.js";
import python from "/vendor/highlight-11.12.0.python.min.js";

hljs.registerLanguage("python", python);
marked.setOptions({ gfm: true, breaks: false });

// The page's own elements, taken from the static page once, before anything from a
// message or a run is drawn: an element of theirs with the same id can never stand in
// for one of these (the module runs after the document is parsed).
const controls = new Map([...document.querySelectorAll("[id]")].map((e) => [e.id, e]));
function $(id) {
  const e = controls.get(id);
  if (!e) throw new Error(`no element #${id} in the page`);
  return e;
}
const TOAST_UPDATED = "Internal tools configuration updated";
const IMAGE_TYPES = ["image/png", "image/svg+xml", "image/jpeg", "image/gif", "image/webp"];

const state = {
  token: localStorage.getItem("sandchat.token") || "",
  me: null,
  catalogue: [],
  agents: [],
  convs: [],
  conv: null, // the open conversation
  seq: 0, // last event seq seen for it
  loading: false, // REST load under way: events wait in pending
  pending: [],
  turn: null, // id of its running turn
  ws: null,
  retry: 0,
  agent: null, // the agent being edited (a copy)
  agentSaved: null,
  showAll: false,
  blobs: new Map(), // file id → promise of its object URL
  ended: new Set(), // turns seen ending
  stopping: null, // turn the user asked to stop
  files: [], // the open conversation's files
};

// ---------- small helpers ----------

// el builds an element: props are DOM properties, except `attrs`, `dataset` and `on*`
// handlers, which are applied the way the DOM expects.
function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    if (k === "attrs") for (const [a, av] of Object.entries(v)) { if (av !== undefined && av !== null && av !== false) e.setAttribute(a, av === true ? "" : String(av)); }
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else e[k] = v;
  }
  e.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

class APIError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + state.token };
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) { headers["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  const res = await fetch("/api/v1" + path, { method, headers, body: payload });
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { detail: text }; } }
  if (res.status === 401) { signOut("Your token was refused; sign in again."); throw new APIError(401, data); }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

function toast(message, level = "success") {
  const t = el("div", { className: "toast " + level, textContent: message, attrs: { role: level === "error" ? "alert" : null } });
  $("toasts").append(t);
  setTimeout(() => t.remove(), level === "error" ? 8000 : 5000);
}

async function guard(fn) {
  try { return await fn(); } catch (e) { if (!(e instanceof APIError && e.status === 401)) toast(e.message, "error"); }
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

function sanitize(html) { return contentPurify.sanitize(html, CONTENT_PURIFY); }

function markdown(text) {
  const div = el("div", { className: "md" });
  div.innerHTML = sanitize(marked.parse(text || ""));
  div.querySelectorAll("pre code").forEach((c) => {
    if (/language-(python|py)\b/.test(c.className)) { c.className = "language-python"; hljs.highlightElement(c); }
  });
  return div;
}

function codeBlock(code) {
  const c = el("code", { className: "language-python", textContent: code });
  hljs.highlightElement(c);
  return el("pre", { className: "code" }, c);
}

function convTitle(c) { return c.title || "New chat"; }
function agentName(id) { return state.agents.find((a) => a.id === id)?.name; }
function formatSize(n) { return n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KB` : `${(n / (1 << 20)).toFixed(1)} MB`; }

// ---------- sign in, navigation ----------

function signOut(message) {
  // The next one to sign in must not find this user's conversation open.
  if (state.conv) closeConversation();
  state.token = "";
  localStorage.removeItem("sandchat.token");
  if (state.ws) { const ws = state.ws; state.ws = null; ws.close(1000); }
  $("login-error").textContent = message || "";
  show("login");
}

function show(view) {
  $("login-view").hidden = view !== "login";
  $("chat-view").hidden = view !== "chat";
  $("agents-view").hidden = view !== "agents";
  $("logout").hidden = view === "login";
  $("menu").hidden = view !== "chat"; // it opens the conversation list
  $("nav-chat").toggleAttribute("aria-current", view === "chat");
  $("nav-agents").toggleAttribute("aria-current", view === "agents");
  if (view === "login") $("token").focus();
}

async function signIn() {
  state.me = await api("GET", "/me");
  // Kept as soon as it is accepted: a reload while the rest loads stays signed in.
  localStorage.setItem("sandchat.token", state.token);
  $("me").textContent = state.me.name;
  state.catalogue = await api("GET", "/internal-tools");
  connect();
  await Promise.all([loadConversations(), loadAgents()]);
  await route();
}

// The address holds what is open (#/c/12, #/agents/3), so a reload keeps it.
async function route() {
  if (!state.me) return;
  const h = location.hash;
  let m;
  if ((m = h.match(/^#\/agents(?:\/(\d+))?$/))) {
    show("agents");
    closeConversation();
    if (m[1]) await openAgent(Number(m[1]));
    else renderAgentForm(null);
    return;
  }
  show("chat");
  if ((m = h.match(/^#\/c\/(\d+)$/))) {
    if (state.conv?.id !== Number(m[1])) await openConversation(Number(m[1]));
  } else if (state.conv) closeConversation();
  setMenu(false);
}

// ---------- the socket ----------

function connect() {
  if (state.ws) { const old = state.ws; state.ws = null; old.close(1000); }
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/ws?access_token=${encodeURIComponent(state.token)}`);
  state.ws = ws;
  ws.onopen = () => {
    state.retry = 0;
    if (state.conv) subscribe(state.conv.id, state.seq || undefined);
  };
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    onEvent(ev);
  };
  ws.onclose = () => {
    if (state.ws !== ws) return;
    state.ws = null;
    const delay = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(() => { if (!state.ws && state.token) connect(); }, delay);
  };
}

function send(frame) {
  if (state.ws?.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(frame));
}

function subscribe(convID, since) {
  const f = { type: "subscribe", conversation_id: convID };
  if (since) f.since = since;
  send(f);
}

function onEvent(ev) {
  if (ev.type === "toast") return onToast(ev.data || {});
  if (ev.type === "error") return toast(ev.data?.message || ev.data?.detail || "Connection error", "error");
  if (ev.type === "internal_tools.updated" || ev.type === "turn.completed" || ev.type === "turn.failed") touchConversationList();
  if (!state.conv || ev.conversation_id !== state.conv.id) return;
  if (ev.type === "subscribed") {
    if (!ev.data?.recovered) loadConversation();
    return;
  }
  if (state.loading) { state.pending.push(ev); return; }
  applyEvent(ev);
}

function onToast(d) {
  let msg = d.message || "";
  if (d.conversation_id && d.conversation_id !== state.conv?.id) {
    const known = state.convs.find((c) => c.id === d.conversation_id);
    const title = d.conversation_title || (known ? convTitle(known) : `conversation ${d.conversation_id}`);
    msg += ` (in “${title}”)`;
  }
  toast(msg, d.level || "success");
}

let listTimer;
function touchConversationList() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => guard(loadConversations), 300);
}

// ---------- conversations ----------

async function loadConversations() {
  state.convs = await api("GET", "/conversations");
  const open = state.convs.find((c) => c.id === state.conv?.id);
  if (open) { state.conv = { ...state.conv, ...open }; renderHeader(); }
  renderConversationList();
}

function renderConversationList() {
  const list = $("convs");
  if (!state.convs.length) { list.replaceChildren(el("li", { className: "empty", textContent: "No conversations yet." })); return; }
  list.replaceChildren(...state.convs.map((c) => {
    const agent = c.agent_id ? agentName(c.agent_id) : null;
    return el("li", {},
      el("a", {
        href: `#/c/${c.id}`, className: "nav-item", dataset: { conv: String(c.id) },
        attrs: { "aria-current": state.conv?.id === c.id ? "page" : null },
      }, el("span", { className: "nav-title", textContent: convTitle(c) }), agent ? el("small", { textContent: agent }) : null));
  }));
}

function closeConversation() {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  state.conv = null;
  state.turn = null;
  $("conv-title").textContent = "Select or start a conversation";
  $("conv-agent-name").hidden = true;
  $("messages").replaceChildren(el("li", { className: "empty", textContent: "Pick a conversation, or choose an agent and start a new chat." }));
  $("attachments").replaceChildren();
  $("turn-status").textContent = "";
  document.title = "sandchat";
  for (const id of ["rename", "delete-conv", "input", "send", "attach", "tools-button", "files-button"]) $(id).disabled = true;
  closePopup(false);
  closeFiles(false);
  renderFiles([]);
  setRunning(null);
  renderConversationList();
}

async function openConversation(id) {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  let conv;
  try { conv = await api("GET", `/conversations/${id}`); } catch (e) {
    toast(e.message, "error");
    location.hash = "#/";
    return;
  }
  state.conv = conv;
  state.seq = 0;
  state.pending = [];
  releaseBlobs(); // the last conversation's images
  closePopup(false);
  closeFiles(false);
  renderHeader();
  for (const b of ["rename", "delete-conv", "input", "send", "attach", "tools-button", "files-button"]) $(b).disabled = false;
  // A viewer reads along: nothing to send, switch or rename.
  for (const b of ["rename", "delete-conv", "input", "send", "attach"]) if (conv.role === "viewer") $(b).disabled = true;
  $("delete-conv").hidden = conv.role !== "owner";
  $("input").placeholder = conv.role === "viewer" ? "You can read this conversation but not write in it." : "Message — Enter sends, Shift+Enter is a new line. Put Python in a ```python block.";
  renderConversationList();
  renderFiles([]); // the last conversation's, until this one's arrive
  // Subscribe first and hold its events until the REST picture is drawn, so nothing
  // that happens in between is lost.
  state.loading = true;
  subscribe(conv.id);
  await loadConversation();
  $("input").focus();
}

function renderHeader() {
  const c = state.conv;
  $("conv-title").textContent = convTitle(c);
  document.title = `${convTitle(c)} — sandchat`;
  const name = c.agent_id ? agentName(c.agent_id) || `agent ${c.agent_id}` : null;
  $("conv-agent-name").hidden = !name;
  $("conv-agent-name").textContent = name ? `with ${name}` : "";
}

async function loadConversation() {
  const conv = state.conv;
  state.loading = true;
  try {
    const [msgs, runs, tools, files] = await Promise.all([
      api("GET", `/conversations/${conv.id}/messages`),
      api("GET", `/conversations/${conv.id}/sandbox/executions`).catch(() => []),
      api("GET", `/conversations/${conv.id}/internal-tools`),
      api("GET", `/conversations/${conv.id}/files`).catch(() => []),
    ]);
    if (state.conv !== conv) return;
    renderTools(tools);
    renderFiles(files);
    renderHistory(msgs, runs);
    const last = [...msgs].reverse().find((m) => m.turn_id);
    setRunning(null);
    let running = null;
    if (last) {
      const turn = await api("GET", `/conversations/${conv.id}/turns/${last.turn_id}`);
      if (turn.status === "running") running = turn.id;
      else if (turn.status !== "completed") showTurnEnd(turn.status, turn.error);
    }
    endOpenCells("did not finish", running);
    setRunning(running);
  } finally {
    if (state.conv === conv) {
      state.loading = false;
      const pending = state.pending;
      state.pending = [];
      pending.forEach(applyEvent);
    }
  }
  scrollToEnd();
}

// ---------- the message list ----------

// Where a message of an agent path goes: the top list for the primary agent, the body
// of the latest handoff block for a child (nested as deep as the path).
const containers = new Map();

function pathKey(path) { return (path || []).join("/"); }

function containerFor(path) {
  if (!path || path.length <= 1) return $("messages");
  const key = pathKey(path);
  let c = containers.get(key);
  if (!c || !c.isConnected) c = handoffBlock(path, null).body;
  return c;
}

function handoffBlock(path, task) {
  const key = pathKey(path);
  const parent = containerFor(path.slice(0, -1));
  const child = path[path.length - 1];
  const status = el("span", { className: "status running", textContent: "working…" });
  const body = el("ol", { className: "handoff-body" });
  const details = el("details", { open: true }, el("summary", {}, el("span", { className: "who", textContent: `↳ ${child}` }), " ", status), task ? el("p", { className: "task", textContent: task }) : null, body);
  const block = el("li", { className: "handoff", dataset: { path: key } }, details);
  block.statusEl = status;
  parent.append(block);
  containers.set(key, body);
  body.block = block;
  return { block, body };
}

function setHandoffStatus(path, status) {
  const body = containers.get(pathKey(path));
  const s = body?.block?.statusEl;
  if (!s) return;
  s.className = "status " + (status === "completed" ? "ok" : status === "failed" ? "failed" : "running");
  s.textContent = status === "completed" ? "done" : status === "failed" ? "failed" : "working…";
}

function renderHistory(msgs, runs) {
  releaseBlobs();
  containers.clear();
  $("messages").replaceChildren();
  // A run belongs to a sandbox call of the same turn with the same code, in order.
  const unused = [...runs];
  const runFor = (turnID, code) => {
    const i = unused.findIndex((r) => r.turn_id === turnID && r.code === code);
    return i < 0 ? null : unused.splice(i, 1)[0];
  };
  const calls = new Map();
  for (const m of msgs) {
    if (m.role === "user") addUserMessage(m);
    else if (m.role === "assistant") {
      addAssistantMessage(m);
      for (const c of parseCalls(m)) {
        calls.set(c.id, c);
        if (c.name === "pyodide_sandbox") {
          const run = runFor(m.turn_id, c.arguments?.code);
          if (run) finishCell(c.id, { ...run, status: run.status });
        }
      }
    } else if (m.role === "tool") addToolResult(m, calls.get(m.tool_call_id));
  }
  if (!msgs.length) $("messages").append(el("li", { className: "empty", textContent: "Say hello, or send Python in a ```python block." }));
}

function parseCalls(m) {
  let calls = m.tool_calls;
  if (typeof calls === "string") { try { calls = JSON.parse(calls); } catch { calls = []; } }
  return (calls || []).map((c) => {
    let args = c.arguments;
    if (typeof args === "string") { try { args = JSON.parse(args); } catch { args = {}; } }
    return { ...c, arguments: args || {} };
  });
}

function messageEl(id) { return id ? $("messages").querySelector(`[data-msg="${id}"]`) : null; }

function addUserMessage(m) {
  if (messageEl(m.id)) return;
  $("messages").querySelector(":scope > li.empty")?.remove();
  $("messages").append(el("li", { className: "msg user", dataset: { msg: String(m.id) } },
    el("div", { className: "who", textContent: m.user_id === state.me?.id ? "You" : "User" }), markdown(m.content)));
}

function whoOf(path) { return (path && path.length ? path[path.length - 1] : "assistant"); }

// An assistant message: its text (when any), then a code cell per sandbox call and a
// nested block per handoff. A streamed draft of the same step is replaced.
function addAssistantMessage(m, draftKey) {
  const box = containerFor(m.agent_path);
  const draft = draftKey ? box.querySelector(`:scope > [data-draft="${CSS.escape(draftKey)}"]`) : null;
  // Already drawn from the REST history: a draft streamed again from held events goes.
  if (messageEl(m.id)) { draft?.remove(); return; }
  let li = null;
  if (m.content) {
    li = el("li", { className: "msg assistant", dataset: { msg: String(m.id) } },
      el("div", { className: "who", textContent: whoOf(m.agent_path) }), markdown(m.content));
  }
  if (draft) { if (li) draft.replaceWith(li); else draft.remove(); } else if (li) box.append(li);
  if (!li) box.append(el("li", { hidden: true, dataset: { msg: String(m.id) } }));
  for (const c of parseCalls(m)) {
    if (c.name === "pyodide_sandbox") ensureCell(c.id, c.arguments.code, m.agent_path, m.turn_id);
    else if (c.name === "delegate") ensureHandoff([...(m.agent_path || []), c.arguments.agent], c.arguments.task);
  }
}

function ensureHandoff(path, task) {
  const key = pathKey(path);
  const existing = containers.get(key);
  // A second handoff to the same child is a new block.
  if (existing?.isConnected && existing.block && !existing.block.dataset.done) return existing;
  return handoffBlock(path, task).body;
}

function addToolResult(m, call) {
  let r;
  try { r = JSON.parse(m.content); } catch { r = { status: "", message: m.content }; }
  if (call?.name === "delegate" || r.agent) {
    const path = [...(m.agent_path || []), r.agent || call?.arguments?.agent];
    setHandoffStatus(path, r.status);
    const body = containers.get(pathKey(path));
    if (body?.block) body.block.dataset.done = "1";
    return;
  }
  const cell = cellEl(m.tool_call_id);
  if (cell && cell.dataset.done) return;
  if (!cell) ensureCell(m.tool_call_id, call?.arguments?.code || "", m.agent_path);
  finishCell(m.tool_call_id, {
    status: r.status, stdout: r.stdout || "", stderr: r.stderr || "", result: r.result,
    error: r.error || (r.status === "refused" ? { type: "Refused", message: r.message } : null), artifacts: [],
  });
}

// ---------- code cells ----------

function cellEl(callID) { return callID ? $("messages").querySelector(`[data-call="${CSS.escape(callID)}"]`) : null; }

function ensureCell(callID, code, path, turnID) {
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
    codeDetails, out, displays, el("div", { className: "cell-result" }));
  cell.statusEl = status;
  cell.outEl = out;
  cell.displayBox = displays;
  cell.displayURLs = [];
  containerFor(path).append(cell);
  return cell;
}

function appendOutput(cell, text, stream) {
  if (cell.dataset.done) return;
  const near = nearBottom();
  cell.outEl.hidden = false;
  const last = cell.outEl.lastChild;
  if (last && last.dataset.stream === (stream || "stdout")) last.textContent += text;
  else cell.outEl.append(el("span", { className: stream === "stderr" ? "stderr" : "stdout", dataset: { stream: stream || "stdout" }, textContent: text }));
  if (near) scrollToEnd();
}

function finishCell(callID, r) {
  const cell = cellEl(callID);
  if (cell && Array.isArray(r.displays)) {
    setDisplays(cell, r.displays);
    // An event leaves out parts too large for it; the stored run has them.
    if (r.execution_id && r.displays.some((d) => d.truncated)) guard(() => fullDisplays(cell, r.execution_id));
  }
  if (!cell || cell.dataset.done) return;
  cell.dataset.done = "1";
  const ok = r.status === "success";
  cell.statusEl.className = "status " + (ok ? "ok" : "failed");
  cell.statusEl.textContent = ok ? `done${r.execution_ms ? ` in ${(r.execution_ms / 1000).toFixed(1)} s` : ""}` : r.status === "timeout" ? "timed out" : r.status === "refused" ? "not run" : "error";
  // The final output replaces what streamed: it is complete and in order.
  cell.outEl.replaceChildren();
  if (r.stdout) cell.outEl.append(el("span", { className: "stdout", textContent: r.stdout }));
  if (r.stderr) cell.outEl.append(el("span", { className: "stderr", textContent: r.stderr }));
  cell.outEl.hidden = !cell.outEl.childNodes.length;
  const res = cell.querySelector(".cell-result");
  res.replaceChildren();
  const value = r.result && typeof r.result === "object" ? r.result.result : r.result;
  if (value !== undefined && value !== null && value !== "") res.append(el("pre", { className: "result", attrs: { "aria-label": "Result" }, textContent: value }));
  const err = typeof r.error === "string" ? safeJSON(r.error) : r.error;
  if (err && (err.traceback || err.message || err.type)) {
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
function endOpenCells(text, runningTurn) {
  $("messages").querySelectorAll(".cell[data-call]:not([data-done])").forEach((c) => {
    if (runningTurn && c.dataset.turn === String(runningTurn)) return;
    c.dataset.done = "1";
    c.statusEl.className = "status failed";
    c.statusEl.textContent = text;
  });
}

// about prefixes a message with the file it is about, unless it already names it.
function about(name, message) { return message.includes(name) ? message : `${name}: ${message}`; }

function safeJSON(s) { try { return JSON.parse(s); } catch { return { message: s }; } }

// ---------- display items ----------

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
function addDisplay(cell, d) {
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

// ---------- files ----------

// Files are fetched with the token in a header and shown from blob: URLs, so no token
// ever sits in an address, a history entry or a log.
// One fetch per file however many elements show it; the URLs live until the list is
// redrawn (releaseBlobs).
function fileURL(id) {
  if (!state.blobs.has(id)) {
    const p = (async () => {
      const res = await fetch(`/api/v1/files/${id}`, { headers: { Authorization: "Bearer " + state.token } });
      if (!res.ok) throw new Error(res.status === 404 ? "That file no longer exists." : `Download failed (${res.status}).`);
      return URL.createObjectURL(await res.blob());
    })();
    p.catch(() => state.blobs.get(id) === p && state.blobs.delete(id)); // a failure is not kept
    state.blobs.set(id, p);
  }
  return state.blobs.get(id);
}

function releaseBlobs() {
  for (const p of state.blobs.values()) p.then((u) => URL.revokeObjectURL(u), () => {});
  state.blobs.clear();
  $("messages").querySelectorAll(".cell[data-call]").forEach((c) => { for (const u of c.displayURLs || []) URL.revokeObjectURL(u); c.displayURLs = []; });
}

function thumbnail(f) {
  const img = el("img", { alt: f.name });
  const button = el("button", { type: "button", className: "thumb", title: `${f.name} — open full size`, attrs: { "aria-label": `Open ${f.name} full size` } }, img);
  fileURL(f.id).then((u) => { img.src = u; }, () => { img.alt = `${f.name} (unavailable)`; });
  button.onclick = () => guard(async () => {
    $("viewer-img").src = await fileURL(f.id);
    $("viewer-img").alt = f.name;
    $("viewer-name").textContent = f.name;
    $("viewer").showModal();
  });
  return el("figure", {}, button, el("figcaption", {}, downloadChip(f)));
}

function downloadChip(f) {
  return el("button", {
    type: "button", className: "chip", title: `Download ${f.name}`, attrs: { "aria-label": `Download ${f.name}` },
    onclick: () => guard(() => download(f)),
  }, "↓ ", f.name, el("small", { textContent: ` ${formatSize(f.size || 0)}` }));
}

function canEdit() { return !!state.conv && state.conv.role !== "viewer"; }

// renderFiles draws the conversation's files twice: its uploads as chips above the
// message box (what Python finds under /data) and every file in the Files panel.
function renderFiles(files) {
  state.files = files;
  renderAttachments(files.filter((f) => f.source === "upload"));
  renderFilesPanel();
}

function renderAttachments(files) {
  $("attachments").replaceChildren(...files.map((f) => el("li", { className: "chip-row", dataset: { file: String(f.id) } },
    downloadChip(f),
    canEdit() ? el("button", {
      type: "button", className: "chip-remove", attrs: { "aria-label": `Remove ${f.name}` }, textContent: "×",
      onclick: () => guard(() => deleteFile(f)),
    }) : null)));
}

function renderFilesPanel() {
  const files = state.files || [];
  $("files-count").textContent = files.length ? `(${files.length})` : "";
  $("files-tools").hidden = !canEdit();
  const focused = $("files-list").contains(document.activeElement) ? document.activeElement.closest("[data-file]")?.dataset.file : null;
  if (!files.length) { $("files-list").replaceChildren(el("li", { className: "empty", textContent: "No files yet." })); return; }
  $("files-list").replaceChildren(...files.map((f) => el("li", { className: "file", dataset: { file: String(f.id) } },
    el("button", { type: "button", className: "file-name", title: `Download ${f.name}`, attrs: { "aria-label": `Download ${f.name}` }, onclick: () => guard(() => download(f)) }, f.name),
    el("small", { textContent: `${f.source === "upload" ? "upload" : "from Python"} · ${formatSize(f.size || 0)}` }),
    canEdit() ? el("button", { type: "button", className: "danger", textContent: "Delete", attrs: { "aria-label": `Delete ${f.name}` }, onclick: () => guard(() => deleteFile(f)) }) : null)));
  // A redraw under the keyboard keeps its place.
  if (focused) $("files-list").querySelector(`[data-file="${focused}"] button`)?.focus();
}

async function refreshFiles() {
  const conv = state.conv;
  if (!conv) return;
  const files = await api("GET", `/conversations/${conv.id}/files`);
  if (state.conv === conv) renderFiles(files);
}

let filesTimer;
function touchFiles() {
  clearTimeout(filesTimer);
  filesTimer = setTimeout(() => guard(refreshFiles), 300);
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

async function download(f) {
  const a = el("a", { href: await fileURL(f.id), download: f.name.split("/").pop() });
  document.body.append(a);
  a.click();
  a.remove();
}

// Each file is sent on its own; one refused (too large, over the quota) does not stop
// the others, and the server's reason is shown as it gave it.
async function uploadFiles(files) {
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
  if (state.conv !== conv) return;
  if (failed.length) {
    $("files-error").textContent = failed.join("\n");
    failed.forEach((m) => toast(m, "error"));
  }
  const stored = files.length - failed.length;
  if (stored) toast(stored === 1 && files.length === 1 ? `${files[0].name} is under /data for Python` : `${stored} files are under /data for Python`);
}

function openFiles() {
  $("files-panel").hidden = false;
  $("files-button").setAttribute("aria-expanded", "true");
  $("files-error").textContent = "";
  guard(refreshFiles);
  ($("files-list").querySelector("button") || $("files-close")).focus();
}

function closeFiles(returnFocus = true) {
  if ($("files-panel").hidden) return;
  $("files-panel").hidden = true;
  $("files-button").setAttribute("aria-expanded", "false");
  if (returnFocus) $("files-button").focus();
}

// ---------- live events ----------

function applyEvent(ev) {
  if (ev.conversation_id !== state.conv?.id) return;
  if (ev.seq) {
    if (state.seq && ev.seq <= state.seq) return; // already seen (replay overlap)
    state.seq = ev.seq;
  }
  const d = ev.data || {};
  const near = nearBottom();
  switch (ev.type) {
    case "internal_tools.updated": renderTools(d.tools); break;
    case "turn.started": if (!state.ended.has(d.turn_id)) setRunning(d.turn_id); break;
    case "message.created":
      if (d.message?.role === "user") addUserMessage(d.message);
      else if (d.message?.role === "tool") addToolResult(d.message, findCall(d.message.tool_call_id));
      break;
    case "message.delta": streamDraft(`${d.turn_id}:${pathKey(ev.agent_path)}:${d.step}`, ev.agent_path, d.text); break;
    case "message.completed":
      if (d.message) addAssistantMessage(d.message, `${d.message.turn_id}:${pathKey(d.message.agent_path)}:${draftStep(d.message)}`);
      break;
    case "tool.started": {
      ensureCell(d.tool_call_id, d.code, ev.agent_path, d.turn_id);
      break;
    }
    case "tool.output": {
      const cell = cellEl(d.tool_call_id) || ensureCell(d.tool_call_id, "", ev.agent_path);
      appendOutput(cell, d.text, d.stream);
      break;
    }
    case "tool.display": {
      const cell = cellEl(d.tool_call_id) || ensureCell(d.tool_call_id, "", ev.agent_path, d.turn_id);
      addDisplay(cell, d);
      break;
    }
    case "tool.completed": {
      const cell = ensureCell(d.tool_call_id, d.code || "", ev.agent_path, d.turn_id);
      if (d.status === "refused" && state.stopping === d.turn_id) {
        // Stopped by the user: keep what it printed, say so.
        cell.dataset.done = "1";
        cell.statusEl.className = "status failed";
        cell.statusEl.textContent = "stopped";
      } else finishCell(d.tool_call_id, d.status === "refused" ? { ...d, error: { type: "Not run", message: d.error } } : d);
      if (d.artifacts?.length || d.displays?.some((x) => x.image)) touchFiles(); // new files of the run
      break;
    }
    case "agent.handoff":
      if (d.status === "started") ensureHandoff(ev.agent_path, d.task);
      else {
        setHandoffStatus(ev.agent_path, d.status);
        const body = containers.get(pathKey(ev.agent_path));
        if (body?.block) body.block.dataset.done = "1";
      }
      break;
    case "turn.completed": case "turn.failed":
      state.ended.add(d.turn_id);
      $("messages").querySelectorAll("[data-draft]").forEach((e) => e.classList.remove("streaming"));
      endOpenCells(d.status === "cancelled" ? "stopped" : "interrupted");
      setRunning(null);
      if (ev.type === "turn.failed") showTurnEnd(d.status, d.error);
      break;
  }
  if (near) scrollToEnd();
}

// Drafts are keyed by step; a completed message finds the draft of its own step, the
// newest one of its path.
const draftSteps = new Map();
function draftStep(m) { return draftSteps.get(`${m.turn_id}:${pathKey(m.agent_path)}`) ?? 0; }

function streamDraft(key, path, text) {
  const [turn, p, step] = key.split(":");
  draftSteps.set(`${turn}:${p}`, Number(step));
  const box = containerFor(path);
  let li = box.querySelector(`:scope > [data-draft="${CSS.escape(key)}"]`);
  if (!li) {
    li = el("li", { className: "msg assistant streaming", dataset: { draft: key } },
      el("div", { className: "who", textContent: whoOf(path) }), el("div", { className: "md" }));
    li.raw = "";
    box.append(li);
  }
  li.raw += text;
  li.querySelector(".md").replaceWith(markdown(li.raw));
}

function findCall(callID) {
  // Calls are only needed to tell handoff results from cells; cells carry data-call.
  return cellEl(callID) ? { name: "pyodide_sandbox" } : null;
}

function setRunning(turnID) {
  state.turn = turnID;
  $("stop").hidden = !turnID;
  $("send").hidden = !!turnID;
  $("chat").setAttribute("aria-busy", turnID ? "true" : "false");
  $("turn-status").textContent = turnID ? "The assistant is working…" : ""; // for screen readers
  const ind = $("messages").querySelector(":scope > .thinking");
  if (turnID && !ind) $("messages").append(el("li", { className: "thinking", attrs: { "aria-label": "The assistant is working" } }, el("span"), el("span"), el("span")));
  if (!turnID) ind?.remove();
  else if (ind) $("messages").append(ind); // keep it last
}

function showTurnEnd(status, error) {
  const text = status === "cancelled" ? "Stopped." : `The turn failed: ${error || status}`;
  $("messages").append(el("li", { className: "turn-end " + (status === "cancelled" ? "cancelled" : "failed"), attrs: { role: "note" }, textContent: text }));
}

function nearBottom() {
  const m = $("messages");
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

// Callers decide: they scroll only when the reader was at the end before the change,
// so someone who scrolled up to read is left where they are.
function scrollToEnd() {
  const m = $("messages");
  const ind = m.querySelector(":scope > .thinking");
  if (ind && ind !== m.lastElementChild) m.append(ind);
  m.scrollTop = m.scrollHeight;
}

// ---------- the Internal tools popup ----------

function sourceText(t) {
  if (!t.available) return `Unavailable: ${t.unavailable_reason || "policy"}`;
  switch (t.source) {
    case "conversation": return `Set for this conversation (${t.enabled ? "on" : "off"})`;
    case "agent": return `From the agent (${t.enabled ? "on" : "off"})`;
    case "policy": return "Deployment policy";
    default: return "Default (off)";
  }
}

function toolSwitch(id, on, disabled, label, onchange) {
  const b = el("button", {
    type: "button", id, className: "switch", disabled,
    attrs: { role: "switch", "aria-checked": on ? "true" : "false", "aria-label": label },
  }, el("span", { className: "knob" }));
  b.onclick = () => { const next = b.getAttribute("aria-checked") !== "true"; b.setAttribute("aria-checked", String(next)); onchange(next); };
  return b;
}

function renderTools(tools) {
  if (!tools) return;
  // A redraw under the keyboard keeps its place.
  const focused = $("tools-list").contains(document.activeElement) && document.activeElement.matches(".switch") ? document.activeElement.closest("[data-tool]").dataset.tool : null;
  $("tools-list").replaceChildren(...tools.map((t) => {
    const sw = toolSwitch("tool-" + t.id, t.enabled, !t.available || state.conv?.role === "viewer", t.name, (on) => guard(async () => {
      try { await api("PUT", `/conversations/${state.conv.id}/internal-tools/${t.id}`, { enabled: on }); } catch (e) { sw.setAttribute("aria-checked", String(!on)); throw e; }
    }));
    const inherit = el("button", {
      type: "button", className: "link", textContent: "Inherit", hidden: t.source !== "conversation",
      title: "Use the agent's setting again", attrs: { "aria-label": `${t.name}: inherit from the agent` },
      onclick: () => guard(() => api("PUT", `/conversations/${state.conv.id}/internal-tools/${t.id}`, { enabled: null })),
    });
    return el("li", { className: "tool", dataset: { tool: t.id, source: t.source } },
      el("div", { className: "tool-text" },
        el("span", { className: "tool-name", textContent: t.name }),
        el("small", { className: "source", textContent: sourceText(t) }),
        t.description ? el("small", { className: "desc", textContent: t.description }) : null),
      el("div", { className: "tool-controls" }, inherit, sw));
  }));
  if (focused && !$("tools-popup").hidden) $("tools-list").querySelector(`[data-tool="${CSS.escape(focused)}"] .switch`)?.focus();
}

function openPopup() {
  $("tools-popup").hidden = false;
  $("tools-button").setAttribute("aria-expanded", "true");
  $("tools-list").querySelector(".switch:not([disabled])")?.focus();
}

function closePopup(returnFocus = true) {
  if ($("tools-popup").hidden) return;
  $("tools-popup").hidden = true;
  $("tools-button").setAttribute("aria-expanded", "false");
  if (returnFocus) $("tools-button").focus();
}

// ---------- agents ----------

async function loadAgents() {
  state.agents = await api("GET", "/agents");
  renderAgentList();
  const sel = $("conv-agent");
  const keep = sel.value;
  sel.replaceChildren(el("option", { value: "", textContent: "No agent" }), ...state.agents.map((a) => el("option", { value: String(a.id), textContent: a.name })));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  if (state.conv) renderHeader();
  renderConversationList();
}

function renderAgentList() {
  const list = $("agents");
  if (!state.agents.length) { list.replaceChildren(el("li", { className: "empty", textContent: "No agents yet." })); return; }
  list.replaceChildren(...state.agents.map((a) => el("li", {},
    el("a", { href: `#/agents/${a.id}`, className: "nav-item", dataset: { agent: String(a.id) }, attrs: { "aria-current": state.agent?.id === a.id ? "page" : null } },
      el("span", { className: "nav-title", textContent: a.name }), a.description ? el("small", { textContent: a.description }) : null))));
}

async function openAgent(id) {
  if (state.agent?.id === id && isDirty()) return;
  const a = await guard(() => api("GET", `/agents/${id}`));
  if (!a) { location.hash = "#/agents"; return; }
  renderAgentForm(a);
}

function renderAgentForm(a) {
  state.agentSaved = a;
  state.agent = a ? structuredClone(a) : null;
  $("agent-form").hidden = !a;
  $("agent-empty").hidden = !!a;
  $("agent-conflict").hidden = true;
  renderAgentList();
  if (!a) return;
  $("agent-title").textContent = a.name;
  $("agent-name").value = a.name;
  $("agent-description").value = a.description || "";
  $("agent-prompt").value = a.system_prompt || "";
  $("agent-model").value = a.model || "";
  const readOnly = a.role === "viewer";
  for (const id of ["agent-name", "agent-description", "agent-prompt", "agent-model", "agent-save"]) $(id).disabled = readOnly;
  $("agent-delete").hidden = a.role !== "owner";
  renderAgentTools();
  renderChildren();
  markDirty();
}

// Featured tools first; "Show all" reveals the rest. Nothing is stored until Save.
function renderAgentTools() {
  const a = state.agent;
  const sorted = [...state.catalogue].sort((x, y) => Number(y.featured) - Number(x.featured));
  const tools = sorted.filter((t) => t.featured || state.showAll);
  const hasMore = sorted.some((t) => !t.featured);
  $("show-all").hidden = !hasMore;
  $("show-all").textContent = state.showAll ? "Show less" : "Show all";
  $("show-all").setAttribute("aria-expanded", String(state.showAll));
  $("agent-tools").replaceChildren(...tools.map((t) => el("li", { className: "tool", dataset: { tool: t.id } },
    el("div", { className: "tool-text" },
      el("span", { className: "tool-name", textContent: t.name }),
      el("small", { className: "desc", textContent: t.description }),
      !t.available ? el("small", { className: "source", textContent: `Unavailable here: ${t.unavailable_reason}` }) : null),
    toolSwitch("agent-tool-" + t.id, !!a.internal_tools[t.id], a.role === "viewer", t.name, (on) => { a.internal_tools[t.id] = on; markDirty(); }))));
}

function renderChildren() {
  const a = state.agent;
  const others = state.agents.filter((x) => x.id !== a.id);
  if (!others.length) { $("agent-children").replaceChildren(el("li", { className: "empty", textContent: "Create other agents to use them as children." })); return; }
  $("agent-children").replaceChildren(...others.map((o) => {
    const box = el("input", { type: "checkbox", id: "child-" + o.id, checked: a.children.includes(o.id), disabled: a.role === "viewer" });
    box.onchange = () => {
      a.children = box.checked ? [...a.children, o.id] : a.children.filter((c) => c !== o.id);
      markDirty();
    };
    return el("li", {}, box, el("label", { htmlFor: box.id, textContent: o.name }), o.description ? el("small", { textContent: ` — ${o.description}` }) : null);
  }));
}

function formAgent() {
  const a = state.agent;
  return { ...a, name: $("agent-name").value, description: $("agent-description").value, system_prompt: $("agent-prompt").value, model: $("agent-model").value };
}

function isDirty() {
  if (!state.agent || !state.agentSaved) return false;
  const f = formAgent(), s = state.agentSaved;
  return f.name !== s.name || f.description !== (s.description || "") || f.system_prompt !== (s.system_prompt || "") || f.model !== (s.model || "") ||
    JSON.stringify(Object.entries(f.internal_tools).filter(([, v]) => v).sort()) !== JSON.stringify(Object.entries(s.internal_tools).filter(([, v]) => v).sort()) ||
    JSON.stringify(f.children) !== JSON.stringify(s.children);
}

function markDirty() { $("agent-dirty").hidden = !isDirty(); }

async function saveAgent() {
  const f = formAgent();
  try {
    const saved = await api("PUT", `/agents/${f.id}`, {
      version: f.version, name: f.name, description: f.description, system_prompt: f.system_prompt, model: f.model,
      internal_tools: f.internal_tools, children: f.children,
    });
    renderAgentForm(saved);
    await loadAgents();
    toast("Agent saved");
  } catch (e) {
    if (e instanceof APIError && e.status === 409 && /changed since version/.test(e.message)) {
      $("agent-conflict").hidden = false;
      $("agent-reload").focus();
      return;
    }
    throw e;
  }
}

// ---------- composer ----------

async function sendMessage() {
  const content = $("input").value;
  if (!content.trim() || !state.conv) return;
  $("send").disabled = true;
  try {
    const started = await api("POST", `/conversations/${state.conv.id}/messages`, { content });
    $("input").value = "";
    addUserMessage(started.message);
    // A quick turn may have ended (over the socket) before this answer arrived.
    if (!state.ended.has(started.turn_id)) setRunning(started.turn_id);
    scrollToEnd();
    if (!state.conv.title) touchConversationList();
  } finally { $("send").disabled = false; }
}

function setMenu(open) {
  document.body.classList.toggle("menu-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
}

function bind() {
  $("login").onsubmit = (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    $("login-error").textContent = "";
    guard(async () => {
      await signIn();
      $("token").value = "";
    });
  };
  $("logout").onclick = () => { state.me = null; signOut(); };
  $("menu").onclick = () => setMenu(!document.body.classList.contains("menu-open"));
  window.addEventListener("hashchange", () => guard(route));

  $("new-conv").onsubmit = (e) => {
    e.preventDefault();
    const agent = $("conv-agent").value;
    guard(async () => {
      const c = await api("POST", "/conversations", agent ? { agent_id: Number(agent) } : {});
      await loadConversations();
      location.hash = `#/c/${c.id}`;
    });
  };
  $("rename").onclick = () => {
    $("rename-input").value = state.conv.title || "";
    $("rename-form").hidden = false;
    $("conv-title").hidden = true;
    $("rename-input").focus();
  };
  const endRename = () => { $("rename-form").hidden = true; $("conv-title").hidden = false; $("rename").focus(); };
  $("rename-cancel").onclick = endRename;
  $("rename-input").onkeydown = (e) => { if (e.key === "Escape") { e.preventDefault(); endRename(); } };
  $("rename-form").onsubmit = (e) => {
    e.preventDefault();
    guard(async () => {
      state.conv = { ...state.conv, ...(await api("PATCH", `/conversations/${state.conv.id}`, { title: $("rename-input").value })) };
      renderHeader();
      endRename();
      await loadConversations();
    });
  };
  $("delete-conv").onclick = () => {
    if (!confirm(`Delete “${convTitle(state.conv)}” and its messages and files?`)) return;
    guard(async () => {
      await api("DELETE", `/conversations/${state.conv.id}`);
      closeConversation();
      location.hash = "#/";
      await loadConversations();
      toast("Conversation deleted");
    });
  };

  $("composer").onsubmit = (e) => { e.preventDefault(); guard(sendMessage); };
  $("input").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); if (!state.turn) guard(sendMessage); }
  };
  $("stop").onclick = () => guard(async () => {
    if (!state.turn) return;
    $("stop").disabled = true;
    state.stopping = state.turn;
    try { await api("POST", `/conversations/${state.conv.id}/turns/${state.turn}/cancel`); } finally { $("stop").disabled = false; }
  });
  $("attach").onclick = () => $("file-input").click();
  // Files dropped on the composer are attached like the button's.
  $("composer").addEventListener("dragover", (e) => {
    if (!state.conv || $("attach").disabled || !e.dataTransfer?.types.includes("Files")) return;
    e.preventDefault();
    $("composer").classList.add("dropping");
  });
  $("composer").addEventListener("dragleave", () => $("composer").classList.remove("dropping"));
  $("composer").addEventListener("drop", (e) => {
    $("composer").classList.remove("dropping");
    if (!state.conv || $("attach").disabled || !e.dataTransfer?.files.length) return;
    e.preventDefault();
    const files = [...e.dataTransfer.files];
    guard(() => uploadFiles(files));
  });
  $("file-input").onchange = () => {
    const files = [...$("file-input").files];
    $("file-input").value = "";
    if (files.length) guard(() => uploadFiles(files));
  };

  $("tools-button").onclick = () => ($("tools-popup").hidden ? openPopup() : closePopup());
  $("files-button").onclick = () => ($("files-panel").hidden ? openFiles() : closeFiles());
  $("files-close").onclick = () => closeFiles();
  $("files-upload").onclick = () => $("files-input").click();
  $("files-input").onchange = () => {
    const files = [...$("files-input").files];
    $("files-input").value = "";
    if (files.length) guard(() => uploadFiles(files));
  };
  const within = (target, ...ids) => ids.some((id) => $(id).contains(target));
  document.addEventListener("mousedown", (e) => {
    if (!$("tools-popup").hidden && !within(e.target, "tools-button", "tools-popup")) closePopup(false);
    if (!$("files-panel").hidden && !within(e.target, "files-panel", "files-button", "toasts")) closeFiles(false);
    if (document.body.classList.contains("menu-open") && !within(e.target, "sidebar", "menu")) setMenu(false);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    if (!$("tools-popup").hidden) { e.preventDefault(); closePopup(); }
    else if (!$("files-panel").hidden && !$("viewer").open) { e.preventDefault(); closeFiles(); }
    else if (document.body.classList.contains("menu-open")) { setMenu(false); $("menu").focus(); }
  });
  document.addEventListener("focusin", (e) => {
    if (!$("tools-popup").hidden && !within(e.target, "tools-button", "tools-popup")) closePopup(false);
  });

  $("new-agent").onsubmit = (e) => {
    e.preventDefault();
    guard(async () => {
      const a = await api("POST", "/agents", { name: $("agent-name-new").value, model: "builtin" });
      $("agent-name-new").value = "";
      await loadAgents();
      location.hash = `#/agents/${a.id}`;
    });
  };
  for (const id of ["agent-name", "agent-description", "agent-prompt", "agent-model"]) $(id).addEventListener("input", markDirty);
  $("show-all").onclick = () => { state.showAll = !state.showAll; renderAgentTools(); $("show-all").focus(); };
  $("agent-form").onsubmit = (e) => { e.preventDefault(); guard(saveAgent); };
  $("agent-reload").onclick = () => guard(async () => { renderAgentForm(await api("GET", `/agents/${state.agent.id}`)); toast("Reloaded the saved agent"); });
  $("agent-delete").onclick = () => {
    if (!confirm(`Delete the agent “${state.agent.name}”? Its conversations stay, without it.`)) return;
    guard(async () => {
      await api("DELETE", `/agents/${state.agent.id}`);
      state.agent = null;
      await loadAgents();
      location.hash = "#/agents";
      toast("Agent deleted");
    });
  };
  window.addEventListener("beforeunload", (e) => { if (isDirty()) e.preventDefault(); });

  if (state.token) guard(signIn); else show("login");
}

bind();
