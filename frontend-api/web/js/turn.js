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

export function showTurnEnd(status, error, turnID) {
  const text = status === "cancelled" ? "Stopped." : `The turn failed: ${error || status}`;
  $("messages").append(el("li", { className: "turn-end " + (status === "cancelled" ? "cancelled" : "failed"), dataset: { turn: turnOf(turnID) }, attrs: { role: "note" }, textContent: text }));
}
