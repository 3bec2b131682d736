// Agents: the list and the Configuration page (TOOLKITS → INTERNAL TOOLS, swarm children).
import { state } from "/js/state.js";
import { $, el, toast } from "/js/dom.js";
import { APIError, api, guard } from "/js/api.js";
import { renderConversationList, renderHeader } from "/js/chat.js";
import { toolSwitch } from "/js/tools.js";

export async function loadAgents() {
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

export async function openAgent(id) {
  if (state.agent?.id === id && isDirty()) return;
  const a = await guard(() => api("GET", `/agents/${id}`));
  if (!a) { location.hash = "#/agents"; return; }
  renderAgentForm(a);
}

export function renderAgentForm(a) {
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

// Featured tools first, and every tool that is on, saved or not; "Show all" reveals the
// rest. Nothing is stored until Save.
export function renderAgentTools() {
  const a = state.agent;
  const on = (t) => !!a.internal_tools[t.id] || !!state.agentSaved?.internal_tools?.[t.id];
  const sorted = [...state.catalogue].sort((x, y) => Number(y.featured) - Number(x.featured));
  const tools = sorted.filter((t) => t.featured || on(t) || state.showAll);
  const hasMore = sorted.some((t) => !t.featured && !on(t));
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
    return el("li", {}, box, el("label", { htmlFor: box.id, textContent: o.name }), o.description ? el("small", { textContent: o.description }) : null);
  }));
}

function formAgent() {
  const a = state.agent;
  return { ...a, name: $("agent-name").value, description: $("agent-description").value, system_prompt: $("agent-prompt").value, model: $("agent-model").value };
}

export function isDirty() {
  if (!state.agent || !state.agentSaved) return false;
  const f = formAgent(), s = state.agentSaved;
  return f.name !== s.name || f.description !== (s.description || "") || f.system_prompt !== (s.system_prompt || "") || f.model !== (s.model || "") ||
    JSON.stringify(Object.entries(f.internal_tools).filter(([, v]) => v).sort()) !== JSON.stringify(Object.entries(s.internal_tools).filter(([, v]) => v).sort()) ||
    JSON.stringify(f.children) !== JSON.stringify(s.children);
}

export function markDirty() { $("agent-dirty").hidden = !isDirty(); }

export async function saveAgent() {
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
