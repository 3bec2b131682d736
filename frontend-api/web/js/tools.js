// The Internal tools popup of the input toolbar.
import { state } from "/js/state.js";
import { $, el } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { offerTools } from "/js/offer.js";

function sourceText(t) {
  if (!t.available) return `Unavailable: ${t.unavailable_reason || "policy"}`;
  switch (t.source) {
    case "conversation": return `Set for this conversation (${t.enabled ? "on" : "off"})`;
    case "agent": return `From the agent (${t.enabled ? "on" : "off"})`;
    case "policy": return "Deployment policy";
    default: return `From the deployment default (${t.enabled ? "on" : "off"})`;
  }
}

export function toolSwitch(id, on, disabled, label, onchange) {
  const b = el("button", {
    type: "button", id, className: "switch", disabled,
    attrs: { role: "switch", "aria-checked": on ? "true" : "false", "aria-label": label },
  }, el("span", { className: "knob" }));
  b.onclick = () => { const next = b.getAttribute("aria-checked") !== "true"; b.setAttribute("aria-checked", String(next)); onchange(next); };
  return b;
}

// The button says at a glance which tools are on, without opening the popup; with no
// conversation open it says nothing.
export function showToolsState(tools) {
  const on = (tools || []).filter((t) => t.enabled);
  const label = !tools ? "Internal tools" : `Internal tools: ${on.length ? on.map((t) => t.name).join(", ") + " on" : "all off"}`;
  $("tools-button").setAttribute("aria-label", label);
  $("tools-button").title = label;
  $("tools-button").classList.toggle("on", on.length > 0);
  // The chip names what is on, each by the first word of its name ("Python", "Swarm").
  $("tools-state").textContent = !tools ? "" : on.length ? on.map((t) => t.name.split(" ")[0]).join(" + ") : "off";
}

export function renderTools(tools) {
  if (!tools) return;
  showToolsState(tools);
  offerTools(tools);
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

// An agent's tools changed elsewhere (saved in another tab): the open conversation of
// that agent shows its tools anew.
export async function agentToolsChanged(agentID) {
  const conv = state.conv;
  if (!conv || conv.agent_id !== agentID) return;
  const tools = await api("GET", `/conversations/${conv.id}/internal-tools`);
  if (state.conv?.id === conv.id) renderTools(tools);
}

export function openPopup() {
  $("tools-popup").hidden = false;
  $("tools-button").setAttribute("aria-expanded", "true");
  $("tools-list").querySelector(".switch:not([disabled])")?.focus();
}

export function closePopup(returnFocus = true) {
  if ($("tools-popup").hidden) return;
  $("tools-popup").hidden = true;
  $("tools-button").setAttribute("aria-expanded", "false");
  if (returnFocus) $("tools-button").focus();
}
