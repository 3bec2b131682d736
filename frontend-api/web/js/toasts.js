// Toasts float over the content, under the chat's header (or the page's), centred
// (app.css): nothing moves when one comes or goes, none covers a control of the
// headers, and clicks pass through them to what is under. A few at most: the oldest goes
// when more come.
import { $ } from "/js/dom.js";

const MAX_TOASTS = 3;

// place puts the toasts under the controls at the top of the view shown: the chat's
// header (whose height changes with the width, and with a rename in progress); on the
// agents' page at phone width, the form that creates one; else the page's header.
function place() {
  const head = !$("chat-view").hidden ? document.querySelector(".chat-head") :
    !$("agents-view").hidden && matchMedia("(max-width: 720px)").matches ? $("new-agent") : null;
  const under = head?.getClientRects().length ? head : document.querySelector("header.top");
  $("toasts").style.setProperty("--toast-top", `${Math.round(under.getBoundingClientRect().bottom) + 6}px`);
}

export function startToasts() {
  new MutationObserver(() => {
    const box = $("toasts");
    while (box.childElementCount > MAX_TOASTS) box.firstElementChild.remove();
    if (box.childElementCount) place();
  }).observe($("toasts"), { childList: true });
  // The chat's header changes height with the width and with a rename in progress.
  const follow = () => { if ($("toasts").childElementCount) place(); };
  addEventListener("resize", follow);
  new ResizeObserver(follow).observe(document.querySelector(".chat-head"));
}
