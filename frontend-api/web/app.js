// The sandchat web client: conversations with live code cells, the input toolbar with
// its Internal tools popup, agents' Configuration page, and toasts — on the v1 API and
// one WebSocket per tab. Plain ES modules, no build step: this entry binds the page's
// controls to the modules under /js, wires what the modules report upward (by events
// and callbacks: no module imports one above it, and none imports this one) and starts.
import { state } from "/js/state.js";
import { $, toast, enterSends } from "/js/dom.js";
import { api, guard, UNAUTHORIZED } from "/js/api.js";
import { TURN_CHANGED } from "/js/turn.js";
import { VERSION_PICKED } from "/js/versions.js";
import { updateOffer } from "/js/offer.js";
import { updateMessageActions, messageUpdated } from "/js/resend.js";
import { signOut, logOut, signIn, start, exchange, linkSecret, route, setMenu } from "/js/session.js";
import { convTitle, inOpenFence, loadConversations, closeConversation, renderHeader, sendMessage, sendKept, newConversation } from "/js/chat.js";
import { uploadFiles, openFiles, closeFiles } from "/js/files.js";
import { openPopup, closePopup } from "/js/tools.js";
import { loadAgents, renderAgentForm, renderAgentTools, isDirty, markDirty, saveAgent } from "/js/agents.js";
import { startFollowing } from "/js/follow.js";
import { startToasts } from "/js/toasts.js";
import { startLive } from "/js/live.js";
import { CONNECTION } from "/js/socket.js";
import { showConnection } from "/js/connection.js";
import { startSearch } from "/js/search.js";

function bind() {
  addEventListener(UNAUTHORIZED, (e) => signOut(e.detail));
  // A turn starting or ending changes what is offered under the latest message.
  addEventListener(TURN_CHANGED, (e) => { updateOffer(); updateMessageActions(); if (!e.detail) guard(sendKept); });
  addEventListener(VERSION_PICKED, (e) => messageUpdated(e.detail));
  addEventListener(CONNECTION, (e) => showConnection(e.detail));
  startFollowing();
  startToasts();
  startLive();
  startSearch();
  // The skip link goes to the message box (or the view's first field) without changing
  // the address, which holds what is open.
  $("skip").onclick = (e) => {
    e.preventDefault();
    const target = !$("chat-view").hidden ? $("input") : [...document.querySelectorAll("main:not([hidden]) :is(input, textarea, select, button):not([disabled])")].find((x) => x.getClientRects().length);
    if (target && !target.disabled) target.focus();
    else $("messages").focus();
  };
  $("login").onsubmit = (e) => {
    e.preventDefault();
    const text = $("token").value.trim();
    $("login-error").textContent = "";
    // A pasted login link (or its secret) is exchanged as if it had been opened.
    const secret = linkSecret(text);
    if (!secret) state.token = text;
    guard(async () => {
      await (secret ? exchange(secret) : signIn());
      $("token").value = "";
    });
  };
  $("logout").onclick = () => guard(logOut);
  $("menu").onclick = () => setMenu(!document.body.classList.contains("menu-open"));
  window.addEventListener("hashchange", () => guard(route));

  $("new-conv").onsubmit = (e) => { e.preventDefault(); guard(newConversation); };
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
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && enterSends() && !inOpenFence($("input"))) { e.preventDefault(); guard(sendMessage); }
  };
  $("stop").onclick = () => guard(async () => {
    if (!state.turn) return;
    $("stop").disabled = true;
    state.stopping = state.turn;
    try { await api("POST", `/conversations/${state.conv.id}/turns/${state.turn}/cancel`); } finally { $("stop").disabled = false; }
  });
  $("attach").onclick = () => $("file-input").click();
  // Files dropped anywhere on the chat (the messages, the header, the box) are attached
  // like the button's. Dropped anywhere else, they are refused: a browser left to
  // itself would open the file in place of the page.
  const carriesFiles = (e) => e.dataTransfer?.types.includes("Files");
  const takesFiles = () => !!state.conv && !$("attach").disabled && !$("chat-view").hidden;
  let dragDepth = 0;
  $("chat").addEventListener("dragenter", (e) => { if (carriesFiles(e) && takesFiles()) { dragDepth++; $("chat").classList.add("dropping"); } });
  $("chat").addEventListener("dragleave", (e) => { if (carriesFiles(e) && --dragDepth <= 0) { dragDepth = 0; $("chat").classList.remove("dropping"); } });
  document.addEventListener("dragover", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = takesFiles() && $("chat").contains(e.target) ? "copy" : "none";
  });
  document.addEventListener("drop", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    dragDepth = 0;
    $("chat").classList.remove("dropping");
    if (!takesFiles() || !$("chat").contains(e.target) || !e.dataTransfer.files.length) return;
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

  guard(start);
}

bind();
