// Signing in and out, which view shows, and the address that holds what is open.
import { state } from "/js/state.js";
import { $ } from "/js/dom.js";
import { api } from "/js/api.js";
import { connect } from "/js/socket.js";
import { loadConversations, closeConversation, openConversation } from "/js/chat.js";
import { loadAgents, openAgent, renderAgentForm } from "/js/agents.js";

export function signOut(message) {
  // The next one to sign in must not find this user's conversation open.
  if (state.conv) closeConversation();
  state.token = "";
  localStorage.removeItem("sandchat.token");
  if (state.ws) { const ws = state.ws; state.ws = null; ws.close(1000); }
  $("login-error").textContent = message || "";
  show("login");
}

export function show(view) {
  $("login-view").hidden = view !== "login";
  $("chat-view").hidden = view !== "chat";
  $("agents-view").hidden = view !== "agents";
  $("logout").hidden = view === "login";
  $("menu").hidden = view !== "chat"; // it opens the conversation list
  $("nav-chat").toggleAttribute("aria-current", view === "chat");
  $("nav-agents").toggleAttribute("aria-current", view === "agents");
  if (view === "login") $("token").focus();
}

export async function signIn() {
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
export async function route() {
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

export function setMenu(open) {
  document.body.classList.toggle("menu-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
}
