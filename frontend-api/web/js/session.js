// Signing in and out, which view shows, and the address that holds what is open.
// A person signs in with a one-time login link (/login#t=…), which this page exchanges
// for a session cookie the page's script never sees; or with a pasted API token, kept
// in the browser's storage.
import { state } from "/js/state.js";
import { $ } from "/js/dom.js";
import { APIError, api } from "/js/api.js";
import { connect, disconnect } from "/js/socket.js";
import { loadConversations, closeConversation, openConversation, showMessage } from "/js/chat.js";
import { loadAgents, openAgent, renderAgentForm } from "/js/agents.js";

// linkSecret is the secret of a login link in text: the link itself or its secret.
export function linkSecret(text) {
  return text.match(/(?:^|#t=)(scl_[A-Za-z0-9_-]+)$/)?.[1] || "";
}

// start signs the page in, if it can: with the login link it was opened by, else a
// token kept from before, else the session cookie.
export async function start() {
  const secret = location.pathname === "/login" ? linkSecret(location.hash) : "";
  if (location.pathname === "/login") {
    // The secret leaves the address, the history and any bookmark at once.
    history.replaceState(null, "", "/");
  }
  if (secret) return exchange(secret);
  if (state.token) return signIn();
  let s;
  try { s = await api("GET", "/auth/session"); } catch (e) { show("login"); throw e; }
  if (!s.user) return show("login");
  state.csrf = s.csrf_token;
  await signIn();
}

// exchange spends a login link's secret for a session, which replaces a kept token.
export async function exchange(secret) {
  state.token = "";
  localStorage.removeItem("sandchat.token");
  try {
    const s = await api("POST", "/auth/login", { token: secret });
    state.csrf = s.csrf_token;
  } catch (e) {
    // A refused link has signed the page out with the server's words already.
    if (!(e instanceof APIError && e.status === 401)) { show("login"); $("login-error").textContent = e.message; }
    return;
  }
  await signIn();
}

export function signOut(message) {
  // The next one to sign in must not find this user's conversation open.
  if (state.conv) closeConversation();
  state.me = null;
  state.token = "";
  state.csrf = "";
  localStorage.removeItem("sandchat.token");
  disconnect();
  $("login-error").textContent = message || "";
  show("login");
}

// logOut is the Sign out button: a browser session is ended on the server too, so its
// cookie signs nobody in any more.
export async function logOut() {
  if (!state.token && state.csrf) {
    // The socket goes first: the server closes the session's sockets as it ends it.
    disconnect();
    try {
      await api("POST", "/auth/logout");
    } catch (e) {
      if (!(e instanceof APIError && e.status === 401)) { connect(); throw e; }
    }
  }
  signOut();
}

export function show(view) {
  $("login-view").hidden = view !== "login";
  $("chat-view").hidden = view !== "chat";
  $("agents-view").hidden = view !== "agents";
  $("logout").hidden = view === "login";
  $("menu").hidden = view !== "chat"; // it opens the conversation list
  $("nav-chat").toggleAttribute("aria-current", view === "chat");
  $("nav-agents").toggleAttribute("aria-current", view === "agents");
  $("skip").textContent = view === "chat" ? "Skip to the message box" : "Skip to the main content";
  if (view === "login") $("token").focus();
}

export async function signIn() {
  state.me = await api("GET", "/me");
  // Kept as soon as it is accepted: a reload while the rest loads stays signed in.
  if (state.token) localStorage.setItem("sandchat.token", state.token);
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
  if ((m = h.match(/^#\/c\/(\d+)(?:\/m\/(\d+))?$/))) {
    // #/c/12/m/345: a search hit, opened at the message it matched.
    if (state.conv?.id !== Number(m[1])) await openConversation(Number(m[1]), m[2] && Number(m[2]));
    else if (m[2]) showMessage(Number(m[2]));
  } else if (!state.conv || !h || h === "#" || h.startsWith("#/")) closeConversation();
  // Any other fragment names a place in the page (#input, the skip link's), not a
  // conversation: what is open stays open.
  setMenu(false);
}

export function setMenu(open) {
  document.body.classList.toggle("menu-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
}
