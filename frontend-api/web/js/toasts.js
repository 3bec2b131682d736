// Toasts stack in a strip of their own under the header (app.css): the view makes room
// for them, so none covers a control or what the reader reads. A few at most: the
// oldest goes when more come.
import { $ } from "/js/dom.js";

const MAX_TOASTS = 3;

export function startToasts() {
  new MutationObserver(() => {
    const box = $("toasts");
    while (box.childElementCount > MAX_TOASTS) box.firstElementChild.remove();
  }).observe($("toasts"), { childList: true });
}
