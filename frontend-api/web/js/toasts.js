// Where toasts go: stacked just above the highest of the chat's bottom controls (the
// message box with its toolbar, the Internal tools popup, the Jump to latest button),
// and never higher than the chat's header, so no toast covers a control. A few at most:
// the oldest goes when more come.
import { $ } from "/js/dom.js";

const GAP = 8;
const MAX_TOASTS = 3;

function shown(e) { return !!e && !e.hidden && e.getClientRects().length > 0; }

function place() {
  const box = $("toasts");
  while (box.childElementCount > MAX_TOASTS) box.firstElementChild.remove();
  let floor = innerHeight - 2 * GAP;
  let ceiling = document.querySelector("header.top").getBoundingClientRect().bottom;
  if (!$("chat-view").hidden) {
    const tops = [$("composer"), $("tools-popup"), document.querySelector(".jump-latest")].filter(shown).map((e) => e.getBoundingClientRect().top);
    floor = Math.min(floor, ...tops) - GAP;
    ceiling = document.querySelector("#chat .chat-head").getBoundingClientRect().bottom;
  }
  box.style.bottom = `${Math.max(0, innerHeight - floor)}px`;
  box.style.maxHeight = `${Math.max(0, floor - ceiling - GAP)}px`;
}

// Controls come and go under the toasts (the popup opens, the message box grows): while
// any toast shows, its place is checked every frame.
let frame = 0;
function tick() {
  frame = 0;
  if (!$("toasts").childElementCount) return;
  place();
  frame = requestAnimationFrame(tick);
}

export function startToasts() {
  new MutationObserver(() => { if (!frame) tick(); }).observe($("toasts"), { childList: true });
}
