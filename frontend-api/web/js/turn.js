// The open conversation's running turn as the page shows it: Stop in place of Send, the
// working indicator, the note of a turn that ended badly. Whatever else depends on a
// turn running (the offer, Regenerate and Edit, the version switchers) hears of each
// change by the window's TURN_CHANGED event: this module imports no view.
import { state } from "/js/state.js";
import { $, el } from "/js/dom.js";
import { turnOf } from "/js/thread.js";

export const TURN_CHANGED = "sandchat:turn-changed";

export function setRunning(turnID) {
  // Stop goes away with the turn: the focus it had goes back to the message box.
  const stopFocused = document.activeElement === $("stop") || (document.activeElement === document.body && state.turn && state.stopping === state.turn);
  state.turn = turnID;
  $("stop").hidden = !turnID;
  $("send").hidden = !!turnID;
  $("chat").setAttribute("aria-busy", turnID ? "true" : "false");
  $("turn-status").textContent = turnID ? "The assistant is working…" : ""; // for screen readers
  const ind = $("messages").querySelector(":scope > .thinking");
  if (turnID && !ind) $("messages").append(el("li", { className: "thinking", attrs: { "aria-label": "The assistant is working" } }, el("span"), el("span"), el("span")));
  if (!turnID) ind?.remove();
  else if (ind) $("messages").append(ind); // keep it last
  if (!turnID && stopFocused && !$("input").disabled) $("input").focus();
  dispatchEvent(new CustomEvent(TURN_CHANGED, { detail: turnID }));
}

// showTurnEnd says, once, how a turn ended that did not complete, under what it drew:
// after its last element in the list, else after the message it answered.
export function showTurnEnd(status, error, turnID) {
  const list = $("messages"), turn = String(turnOf(turnID) ?? "");
  if (turn && list.querySelector(`:scope > .turn-end[data-turn="${CSS.escape(turn)}"]`)) return;
  const text = status === "cancelled" ? "Stopped." : `The turn failed: ${error || status}`;
  const note = el("li", { className: "turn-end " + (status === "cancelled" ? "cancelled" : "failed"), dataset: { turn: turn || undefined }, attrs: { role: "note" }, textContent: text });
  const drawn = turn ? [...list.querySelectorAll(`:scope > [data-turn="${CSS.escape(turn)}"]`)].pop() : null;
  const asked = turn && !drawn ? [...list.querySelectorAll(":scope > li.msg.user")].find((u) => u.versions?.includes(turn)) : null;
  let at = drawn || asked;
  // What else answered that message (an earlier version's elements) stays above it.
  while (at && asked && at.nextElementSibling && !at.nextElementSibling.matches("li.msg.user, .thinking")) at = at.nextElementSibling;
  if (at) at.after(note);
  else list.append(note);
  const ind = list.querySelector(":scope > .thinking");
  if (ind) list.append(ind); // the working indicator stays last
}
