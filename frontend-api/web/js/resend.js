// The two ways to have the latest message answered again, for a user who may edit:
// Regenerate under the last answer, and Edit on one's own latest message, which turns
// it into a box with Send and Cancel. Both start a new turn on the server (the retry
// endpoint), whose answer is a new version of the message's: it replaces the earlier
// one in place, which stays a version to switch back to (js/versions.js).
import { state } from "/js/state.js";
import { $, el, markdown, enterSends } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { scrollToEnd } from "/js/thread.js";
import { setRunning } from "/js/turn.js";
import { updateOffer } from "/js/offer.js";
import { setVersions, drawVersions, tools } from "/js/versions.js";

// updateMessageActions draws Regenerate and Edit, or takes them away, and the version
// switchers as a running turn allows, from what the page shows: it is called whenever a
// turn starts or ends (app.js, on turn.js's TURN_CHANGED) and a version is switched.
export function updateMessageActions() {
  const list = $("messages");
  list.querySelector(":scope > li.msg-actions")?.remove();
  list.querySelectorAll(":scope > li.msg.user > .msg-tools > .edit").forEach((t) => t.remove());
  const users = list.querySelectorAll(":scope > li.msg.user");
  users.forEach(drawVersions);
  list.querySelectorAll(":scope > li.msg.user > .msg-tools:empty").forEach((t) => t.remove());
  const conv = state.conv;
  if (!conv || state.turn || conv.role === "viewer") return;
  const user = users[users.length - 1];
  if (!user) return;

  // Edit: the author's own latest message, unless it is being edited already.
  if (user.dataset.author === String(state.me?.id) && !user.classList.contains("editing")) {
    const edit = el("button", { type: "button", className: "link edit", textContent: "Edit" });
    edit.onclick = () => openEditor(user);
    tools(user).append(edit);
  }

  // Regenerate: under the last of what answered that message, as shown.
  let answer = null;
  for (let n = user.nextElementSibling; n; n = n.nextElementSibling) {
    if (n.matches(".msg.assistant, .cell, .handoff, .turn-end") && !n.hidden) answer = n;
  }
  if (!answer) return;
  const again = el("button", { type: "button", className: "link", textContent: "Regenerate" });
  again.onclick = () => retry(conv, user.dataset.msg, again);
  answer.after(el("li", { className: "msg-actions" }, again));
}

// messageUpdated redraws a user message edited, answered again or switched to another
// version, here or in another tab.
export function messageUpdated(m) {
  const li = $("messages").querySelector(`:scope > li.msg.user[data-msg="${m.id}"]`);
  if (!li) return;
  if (m.content !== li.raw) {
    closeEditor(li);
    li.raw = m.content;
    li.querySelector(":scope > .md").replaceWith(markdown(m.content));
  }
  setVersions(li, m);
  updateMessageActions();
  updateOffer();
}

function openEditor(li) {
  const conv = state.conv;
  const md = li.querySelector(":scope > .md");
  const original = li.raw ?? md.textContent;
  li.classList.add("editing");
  li.querySelector(":scope > .msg-tools")?.setAttribute("hidden", "");
  const box = el("textarea", { className: "msg-edit", value: original, rows: Math.min(12, Math.max(2, original.split("\n").length)), attrs: { "aria-label": "Edit message" } });
  const send = el("button", { type: "button", className: "primary", textContent: "Send" });
  const cancel = el("button", { type: "button", textContent: "Cancel" });
  const editor = el("div", { className: "msg-editor" }, box, el("div", { className: "msg-editor-buttons" }, cancel, send));
  md.hidden = true;
  md.after(editor);
  const submit = () => {
    const content = box.value;
    if (!content.trim()) { box.focus(); return; }
    send.disabled = true;
    guard(async () => {
      try {
        const r = await api("POST", `/conversations/${conv.id}/messages/${li.dataset.msg}/retry`, { content });
        messageUpdated({ id: li.dataset.msg, content });
        if (state.conv?.id === conv.id && !state.ended.has(r.turn_id)) setRunning(r.turn_id);
        scrollToEnd(); // where the new answer comes
        if (!$("input").disabled) $("input").focus();
      } finally { send.disabled = false; }
    });
  };
  send.onclick = submit;
  cancel.onclick = () => {
    closeEditor(li);
    updateMessageActions();
    li.querySelector(":scope > .msg-tools > .edit")?.focus();
  };
  box.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { e.preventDefault(); cancel.onclick(); }
    else if (e.key === "Enter" && !e.shiftKey && !e.isComposing && enterSends()) { e.preventDefault(); submit(); }
  });
  box.focus({ preventScroll: true });
  box.setSelectionRange(box.value.length, box.value.length);
  // After the list has followed its end (js/follow.js): the message is what the reader edits
  // now, and scrolling to it stops the following until they come back down.
  requestAnimationFrame(() => li.scrollIntoView({ block: "nearest" }));
}

function closeEditor(li) {
  li.querySelector(":scope > .msg-editor")?.remove();
  li.querySelector(":scope > .msg-tools")?.removeAttribute("hidden");
  li.classList.remove("editing");
  const md = li.querySelector(":scope > .md");
  if (md) md.hidden = false;
}

function retry(conv, messageID, button) {
  button.disabled = true;
  guard(async () => {
    try {
      const r = await api("POST", `/conversations/${conv.id}/messages/${messageID}/retry`);
      if (state.conv?.id === conv.id && !state.ended.has(r.turn_id)) setRunning(r.turn_id);
    } finally {
      button.disabled = false;
      if (!button.isConnected && !$("input").disabled) $("input").focus();
    }
  });
}
