// The two ways to have the latest message answered again, for a user who may edit:
// Regenerate under the last answer, and Edit on one's own latest message, which turns
// it into a box with Send and Cancel. Both start a new turn on the server (the retry
// endpoint); the earlier answer stays on the page, and the model no longer sees it.
import { state } from "/js/state.js";
import { $, el, markdown } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { setRunning, scrollToEnd } from "/js/messages.js";
import { enterSends } from "/js/chat.js";

// updateMessageActions draws Regenerate and Edit, or takes them away, from what the page
// shows: it is called whenever a turn starts or ends (setRunning).
export function updateMessageActions() {
  const list = $("messages");
  list.querySelector(":scope > li.msg-actions")?.remove();
  list.querySelectorAll(":scope > li.msg.user > .msg-tools").forEach((t) => t.remove());
  const conv = state.conv;
  if (!conv || state.turn || conv.role === "viewer") return;
  const users = list.querySelectorAll(":scope > li.msg.user");
  const user = users[users.length - 1];
  if (!user) return;

  // Edit: the author's own latest message, unless it is being edited already.
  if (user.dataset.author === String(state.me?.id) && !user.classList.contains("editing")) {
    const edit = el("button", { type: "button", className: "link", textContent: "Edit" });
    edit.onclick = () => openEditor(user);
    user.append(el("div", { className: "msg-tools" }, edit));
  }

  // Regenerate: under the last of what answered that message.
  let answer = null;
  for (let n = user.nextElementSibling; n; n = n.nextElementSibling) {
    if (n.matches(".msg.assistant, .cell, .handoff, .turn-end")) answer = n;
  }
  if (!answer) return;
  const again = el("button", { type: "button", className: "link", textContent: "Regenerate" });
  again.onclick = () => retry(conv, user.dataset.msg, again);
  answer.after(el("li", { className: "msg-actions" }, again));
}

// messageUpdated redraws a user message edited here or in another tab.
export function messageUpdated(m) {
  const li = $("messages").querySelector(`:scope > li.msg.user[data-msg="${m.id}"]`);
  if (!li) return;
  closeEditor(li);
  li.raw = m.content;
  li.querySelector(":scope > .md").replaceWith(markdown(m.content));
}

function openEditor(li) {
  const conv = state.conv;
  const md = li.querySelector(":scope > .md");
  const original = li.raw ?? md.textContent;
  li.classList.add("editing");
  li.querySelector(":scope > .msg-tools")?.remove();
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
    li.querySelector(":scope > .msg-tools > button")?.focus();
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
