// Answer versions. A user message answered again (Regenerate, Edit, "Turn on Python
// sandbox and run") keeps each answer as a version of it: the page shows the current
// one in place, under the message, and ‹ 1 / 2 › under the message switches between
// them. The server keeps which version is current (PUT …/messages/{id}/answer); every
// tab follows its message.updated. What an answer drew carries its turn (data-turn).
import { state } from "/js/state.js";
import { el } from "/js/dom.js";
import { api, guard } from "/js/api.js";

// VERSION_PICKED tells, with the message as the server answered (detail), that the user
// switched its answer here: the page redraws it as for message.updated (app.js).
export const VERSION_PICKED = "sandchat:version-picked";

// setVersions takes a user message's versions and current answer from a message as the
// server sends it (a message without them leaves them as they were) and shows them.
export function setVersions(li, m) {
  if (!Array.isArray(m.versions)) return;
  li.versions = m.versions.map(String);
  li.dataset.answer = String(m.answer_turn_id ?? li.versions[li.versions.length - 1] ?? "");
  showVersion(li);
  drawVersions(li);
}

// showVersion shows, of what answered the message li, its current version only.
export function showVersion(li) {
  const versions = new Set(li.versions || []);
  if (versions.size < 2) return;
  for (let n = li.nextElementSibling; n && !n.matches("li.msg.user"); n = n.nextElementSibling) {
    const turn = n.dataset.turn;
    if (turn && versions.has(turn)) n.hidden = turn !== li.dataset.answer;
  }
}

// drawVersions draws the switcher of a message with more than one version, or takes it
// away: a viewer, who may not switch, reads the current version only. While a turn runs
// it only says which version is shown.
export function drawVersions(li) {
  const versions = li.versions || [];
  let nav = li.querySelector(":scope > .msg-tools > .versions");
  if (versions.length < 2 || state.conv?.role === "viewer") { nav?.remove(); return; }
  const i = Math.max(0, versions.indexOf(li.dataset.answer)), n = versions.length;
  const locked = !!state.turn;
  if (!nav) {
    const button = (cls, text, label, step) => el("button", {
      type: "button", className: "link " + cls, textContent: text, attrs: { "aria-label": label },
      onclick: () => pick(li, step),
    });
    nav = el("div", { className: "versions", attrs: { role: "group" } },
      button("version-prev", "‹", "Previous answer", -1),
      el("span", { className: "version-count", attrs: { "aria-hidden": "true" } }),
      button("version-next", "›", "Next answer", 1));
    tools(li).prepend(nav);
  }
  nav.setAttribute("aria-label", `Answer ${i + 1} of ${n}`);
  nav.querySelector(".version-count").textContent = `${i + 1} / ${n}`;
  const [prev, next] = nav.querySelectorAll("button");
  // A button that comes to an end hands its focus to the other: a keyboard user who
  // went back to the first answer can come forward again at once.
  const focused = document.activeElement;
  prev.disabled = locked || i === 0;
  next.disabled = locked || i === n - 1;
  if (focused === prev && prev.disabled && !next.disabled) next.focus();
  if (focused === next && next.disabled && !prev.disabled) prev.focus();
}

// tools is the row under a user message that holds its switcher and its Edit.
export function tools(li) {
  let row = li.querySelector(":scope > .msg-tools");
  if (!row) li.append(row = el("div", { className: "msg-tools" }));
  return row;
}

function pick(li, step) {
  const conv = state.conv;
  const versions = li.versions || [];
  const turn = versions[versions.indexOf(li.dataset.answer) + step];
  if (!conv || !turn) return;
  guard(async () => {
    const m = await api("PUT", `/conversations/${conv.id}/messages/${li.dataset.msg}/answer`, { turn_id: Number(turn) });
    // Its message.updated may have come first, or come after: it is the same picture.
    if (state.conv?.id === conv.id) dispatchEvent(new CustomEvent(VERSION_PICKED, { detail: m }));
  });
}
