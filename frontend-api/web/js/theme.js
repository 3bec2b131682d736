// The page's theme, set before it is drawn: the one chosen with the header's Theme
// (kept in this browser), else the system's (prefers-color-scheme: app.css draws both
// with light-dark()). A classic script in <head>, not a module, so that a page chosen
// dark never shows light first. A change is told by the window's "sandchat:theme"
// event: the frames of display items follow it (js/displays.js).
(() => {
  const KEY = "sandchat.theme";
  const apply = (t) => {
    if (t === "light" || t === "dark") document.documentElement.dataset.theme = t;
    else delete document.documentElement.dataset.theme;
  };
  let chosen = "";
  try { chosen = localStorage.getItem(KEY) || ""; } catch { /* storage refused: the system's */ }
  apply(chosen);
  addEventListener("DOMContentLoaded", () => {
    const select = document.getElementById("theme");
    select.value = chosen === "light" || chosen === "dark" ? chosen : "";
    select.addEventListener("change", () => {
      chosen = select.value;
      try { if (chosen) localStorage.setItem(KEY, chosen); else localStorage.removeItem(KEY); } catch { /* this page only */ }
      apply(chosen);
      dispatchEvent(new CustomEvent("sandchat:theme"));
    });
  });
})();
