// Following the newest output. The message list stays at its end while the reader is
// there, however it grows: streamed lines, but also images and display items that take
// their height only once they have loaded, after the event that drew them. A reader who
// scrolls up is left where they are, with a "Jump to latest" button to come back.
import { $, el } from "/js/dom.js";

// Within this many pixels of the end counts as at the end.
const SLACK = 80;

let following = true;
let lastTop = 0;
let jump = null;

function atEnd(m) { return m.scrollHeight - m.scrollTop - m.clientHeight < SLACK; }

export function isFollowing() { return following; }

// follow goes to the end and follows from now on.
export function follow() {
  following = true;
  pin();
}

function pin() {
  const m = $("messages");
  // The working indicator stays the last thing in the list.
  const ind = m.querySelector(":scope > .thinking");
  if (ind && ind !== m.lastElementChild) m.append(ind);
  m.scrollTop = m.scrollHeight;
  lastTop = m.scrollTop;
  showJump(false);
}

// hold brings e into view, in the middle of the list, and stops following the end:
// the reader was sent there (a search hit), and new output must not take them away.
export function hold(e) {
  const m = $("messages");
  following = false;
  e.scrollIntoView({ block: "center" });
  lastTop = m.scrollTop;
  showJump(!atEnd(m));
}

// The button floats over the end of the list, whatever the height of what is under it.
function showJump(show) {
  if (!jump) return;
  if (show) jump.style.bottom = `${$("chat").getBoundingClientRect().bottom - $("messages").getBoundingClientRect().bottom + 10}px`;
  jump.hidden = !show;
}

// grown runs on any change that may move the end: the list follows it, or, for a
// reader who scrolled up, offers the way back.
function grown() {
  const m = $("messages");
  // A move up whose scroll event has not come yet (it comes with the next frame, later
  // on a busy machine) is already the reader leaving: pinning now would undo it.
  if (following && m.scrollTop < lastTop - 1 && !atEnd(m)) following = false;
  if (following) pin();
  else showJump(!atEnd(m));
}

export function startFollowing() {
  const m = $("messages");
  jump = el("button", { type: "button", className: "jump-latest", hidden: true, textContent: "Jump to latest", onclick: () => follow() });
  m.after(jump);
  m.addEventListener("scroll", () => {
    // Only a move up is the reader leaving the end: the list moving down, or staying,
    // is this module pinning it (its scroll event can come after the list grew again).
    if (m.scrollTop < lastTop - 1) following = atEnd(m);
    else if (atEnd(m)) following = true;
    lastTop = m.scrollTop;
    showJump(!following && !atEnd(m));
  }, { passive: true });
  new MutationObserver(grown).observe(m, { childList: true, subtree: true, characterData: true });
  // An image's height arrives with its load; a details element opened or closed moves
  // what is under it. Neither bubbles: they are caught on the way down.
  m.addEventListener("load", grown, true);
  m.addEventListener("toggle", grown, true);
  new ResizeObserver(grown).observe(m);
}
