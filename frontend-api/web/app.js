// The sandchat web client: chat with the Internal tools popup, an agent's TOOLKITS page,
// and toasts, all over the v1 API and one WebSocket per tab.
const $ = (id) => document.getElementById(id);
const state = { token: localStorage.getItem("sandchat.token") || "", conv: null, seq: 0, ws: null, catalogue: [], agent: null, showAll: false, displays: new Map() };

async function api(method, path, body) {
  const res = await fetch("/api/v1" + path, {
    method,
    headers: { Authorization: "Bearer " + state.token, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(data?.detail || res.statusText);
  return data;
}

function el(tag, props = {}, ...children) {
  // dataset has only a getter: assigning it throws in a module, so its keys are copied.
  const { dataset, ...rest } = props;
  const e = Object.assign(document.createElement(tag), rest);
  Object.assign(e.dataset, dataset || {});
  e.append(...children);
  return e;
}

function toast(message, level = "success") {
  const t = el("div", { className: "toast " + level, textContent: message });
  $("toasts").append(t);
  setTimeout(() => t.remove(), 5000);
}

async function guard(fn) {
  try { await fn(); } catch (e) { toast(e.message, "error"); }
}

// One socket per tab: toasts for this user, events of the open conversation. After a
// drop it reconnects and asks for what it missed with since.
function connect() {
  if (state.ws) state.ws.close();
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/ws?access_token=${encodeURIComponent(state.token)}`);
  state.ws = ws;
  ws.onopen = () => { if (state.conv) subscribe(state.seq); };
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = (e) => { if (state.ws === ws && e.code !== 1000) setTimeout(connect, 1000); };
}

function subscribe(since) {
  if (state.ws?.readyState !== WebSocket.OPEN) return;
  const msg = { type: "subscribe", conversation_id: state.conv.id };
  if (since) msg.since = since;
  state.ws.send(JSON.stringify(msg));
}

function onEvent(ev) {
  if (ev.type === "toast") return toast(ev.data.message, ev.data.level);
  if (!state.conv || ev.conversation_id !== state.conv.id) return;
  if (ev.type === "subscribed" && !ev.data.recovered) return loadMessages();
  if (ev.seq) state.seq = ev.seq;
  switch (ev.type) {
    case "internal_tools.updated": return renderTools(ev.data.tools);
    case "message.delta": return streamText(ev.data.turn_id + ":" + (ev.agent_path || []).join("/") + ":" + ev.data.step, ev.data.text, "assistant");
    case "tool.output": return streamText(ev.data.tool_call_id, ev.data.text, "tool");
    case "tool.display": return addDisplay(ev.data.tool_call_id, ev.data);
    case "tool.completed": return completeDisplays(ev.data.tool_call_id, ev.data.displays);
    case "message.created": case "message.completed": case "turn.completed": case "turn.failed": return loadMessages();
  }
}

function streamText(key, text, role) {
  let li = document.querySelector(`[data-stream="${CSS.escape(key)}"]`);
  if (!li) li = $("messages").appendChild(el("li", { className: role, dataset: { stream: key } }));
  li.textContent += text;
}

// Display items of a run: HTML and SVG are the user code's word, so they pass through
// DOMPurify before they reach the page (the CSP forbids inline scripts besides); images
// are the stored files, by id.
function addDisplay(callID, item) {
  const items = state.displays.get(callID) || [];
  items[item.index ?? items.length] = item;
  state.displays.set(callID, items);
  renderDisplays(callID);
}

function completeDisplays(callID, items) {
  if (!items?.length) return;
  state.displays.set(callID, items);
  renderDisplays(callID);
}

function renderDisplays(callID) {
  let box = document.querySelector(`[data-displays="${CSS.escape(callID)}"]`);
  if (!box) {
    box = el("li", { className: "displays", dataset: { displays: callID } });
    const result = document.querySelector(`[data-toolcall="${CSS.escape(callID)}"]`);
    if (result) result.after(box);
    else $("messages").append(box);
  }
  box.replaceChildren(...(state.displays.get(callID) || []).filter(Boolean).map(displayItem));
}

function displayItem(d) {
  const div = el("div", { className: "display " + (d.kind || "display") });
  if (d.image) {
    if (d.image.file_id) {
      const img = div.appendChild(el("img", { alt: d.image.name, width: d.image.width, height: d.image.height }));
      loadImage(img, d.image.file_id);
    } else {
      div.append(el("em", { textContent: `image ${d.image.name} (${d.image.width}×${d.image.height})…` }));
    }
  } else if (d.html && window.DOMPurify) {
    div.innerHTML = DOMPurify.sanitize(d.html, { USE_PROFILES: { html: true } });
  } else if (d.svg && window.DOMPurify) {
    div.innerHTML = DOMPurify.sanitize(d.svg, { USE_PROFILES: { svg: true, svgFilters: true } });
  } else {
    div.append(el("pre", { textContent: d.markdown || (d.json ? JSON.stringify(d.json, null, 2) : d.latex || d.text || "") }));
  }
  return div;
}

// Files need the Authorization header, which an <img> cannot send: fetch the bytes and
// show them as a data: URL (the page's CSP allows images from data: and this origin).
const imageCache = new Map();
function loadImage(img, fileID) {
  if (!imageCache.has(fileID)) {
    imageCache.set(fileID, fetch(`/api/v1/files/${fileID}`, { headers: { Authorization: "Bearer " + state.token } })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(r.statusText))))
      .then((b) => new Promise((resolve) => { const fr = new FileReader(); fr.onload = () => resolve(fr.result); fr.readAsDataURL(b); })));
  }
  imageCache.get(fileID).then((url) => { img.src = url; }, () => imageCache.delete(fileID));
}

async function loadMe() {
  const me = await api("GET", "/me");
  $("me").textContent = me.name;
  state.catalogue = await api("GET", "/internal-tools");
  connect();
  await Promise.all([loadConversations(), loadAgents()]);
}

async function loadConversations() {
  const convs = await api("GET", "/conversations");
  $("convs").replaceChildren(...convs.map((c) =>
    el("li", { textContent: c.title || `Conversation ${c.id}`, className: state.conv?.id === c.id ? "active" : "", onclick: () => guard(() => openConversation(c)) })));
}

async function openConversation(c) {
  state.conv = c;
  $("conv-title").textContent = c.title || `Conversation ${c.id}`;
  $("tools-button").disabled = $("send").disabled = false;
  await loadMessages();
  renderTools(await api("GET", `/conversations/${c.id}/internal-tools`));
  subscribe(state.seq);
  loadConversations();
}

async function loadMessages() {
  const msgs = await api("GET", `/conversations/${state.conv.id}/messages`);
  $("messages").replaceChildren(...msgs.map((m) => {
    let text = m.content;
    if (m.role === "assistant" && m.tool_calls) text += m.tool_calls.map((c) => `\n▶ ${c.name}: ${c.arguments.code ?? JSON.stringify(c.arguments)}`).join("");
    const who = m.role === "user" ? "" : `${(m.agent_path || []).join(" › ")}: `;
    const li = el("li", { className: m.role, textContent: who + text });
    if (m.role === "tool") li.dataset.toolcall = m.tool_call_id;
    return li;
  }));
  // Display items seen on this page stay under their tool result.
  for (const m of msgs) {
    if (m.role === "tool" && state.displays.has(m.tool_call_id)) renderDisplays(m.tool_call_id);
  }
}

// The chat toolbar's popup: one switch per tool, showing where its state comes from.
function renderTools(tools) {
  $("tools-list").replaceChildren(...tools.map((t) => {
    const box = el("input", { type: "checkbox", checked: t.enabled, disabled: !t.available, id: "tool-" + t.id });
    box.onchange = () => guard(async () => {
      await api("PUT", `/conversations/${state.conv.id}/internal-tools/${t.id}`, { enabled: box.checked });
    });
    const reset = el("button", { type: "button", textContent: "Inherit", hidden: t.source !== "conversation" });
    reset.onclick = () => guard(() => api("PUT", `/conversations/${state.conv.id}/internal-tools/${t.id}`, { enabled: null }));
    const note = t.available ? `from ${t.source}` : t.unavailable_reason;
    return el("li", { className: "tool" }, el("label", { htmlFor: box.id }, t.name, el("small", { textContent: note })), el("span", {}, reset, box));
  }));
}

async function loadAgents() {
  const agents = await api("GET", "/agents");
  $("conv-agent").replaceChildren(el("option", { value: "", textContent: "No agent" }), ...agents.map((a) => el("option", { value: a.id, textContent: a.name })));
  $("agents").replaceChildren(...agents.map((a) => el("li", { textContent: a.name, className: state.agent?.id === a.id ? "active" : "", onclick: () => openAgent(a) })));
}

// The agent's Configuration tab: TOOLKITS → INTERNAL TOOLS, featured first, "Show all"
// for the rest; nothing is stored until Save.
function openAgent(a) {
  state.agent = structuredClone(a);
  $("agent-title").textContent = a.name;
  $("agent-form").hidden = false;
  $("agent-prompt").value = a.system_prompt;
  $("agent-model").value = a.model;
  renderAgentTools();
}

function renderAgentTools() {
  const tools = state.catalogue.filter((t) => t.featured || state.showAll);
  $("show-all").hidden = state.showAll || tools.length === state.catalogue.length;
  $("agent-tools").replaceChildren(...tools.map((t) => {
    const box = el("input", { type: "checkbox", checked: !!state.agent.internal_tools[t.id], id: "agent-tool-" + t.id });
    box.onchange = () => { state.agent.internal_tools[t.id] = box.checked; };
    return el("li", { className: "tool" }, el("label", { htmlFor: box.id }, t.name, el("small", { textContent: t.description })), box);
  }));
}

function bind() {
  $("token").value = state.token;
  $("login").onsubmit = (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    localStorage.setItem("sandchat.token", state.token);
    guard(loadMe);
  };
  $("nav-chat").onclick = () => { $("chat-view").hidden = false; $("agents-view").hidden = true; $("nav-chat").classList.add("active"); $("nav-agents").classList.remove("active"); };
  $("nav-agents").onclick = () => { $("chat-view").hidden = true; $("agents-view").hidden = false; $("nav-agents").classList.add("active"); $("nav-chat").classList.remove("active"); };
  $("tools-button").onclick = () => { $("tools-popup").hidden = !$("tools-popup").hidden; };
  $("new-conv").onsubmit = (e) => {
    e.preventDefault();
    const agent = $("conv-agent").value;
    guard(async () => openConversation(await api("POST", "/conversations", agent ? { agent_id: Number(agent) } : {})));
  };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const content = $("input").value;
    guard(async () => { await api("POST", `/conversations/${state.conv.id}/messages`, { content }); $("input").value = ""; });
  };
  $("new-agent").onsubmit = (e) => {
    e.preventDefault();
    guard(async () => { openAgent(await api("POST", "/agents", { name: $("agent-name").value })); await loadAgents(); });
  };
  $("show-all").onclick = () => { state.showAll = true; renderAgentTools(); };
  $("agent-save").onclick = () => guard(async () => {
    const a = state.agent;
    const saved = await api("PUT", `/agents/${a.id}`, { version: a.version, system_prompt: $("agent-prompt").value, model: $("agent-model").value, internal_tools: a.internal_tools });
    openAgent(saved);
    await loadAgents();
    toast("Agent saved");
  });
  if (state.token) guard(loadMe);
}

bind();
