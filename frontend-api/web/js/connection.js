// What the page says while the server cannot be reached (socket.js finds out): the
// header's "Reconnecting…" or "Offline", the same on each running cell, and the note of
// a message kept in the box; once the server answers again, the kept message goes out.
import { $ } from "/js/dom.js";
import { guard } from "/js/api.js";
import { showConnection as showOnCells } from "/js/cells.js";
import { showKept, sendKept, touchConversationList } from "/js/chat.js";

export function showConnection(status) {
  $("conn").textContent = status === "offline" ? "Offline" : status === "reconnecting" ? "Reconnecting…" : "";
  $("conn").title = status === "offline" ? "This browser is offline; the page reconnects when it is back online." :
    status === "reconnecting" ? "The server cannot be reached; the page keeps trying and picks up where it was." : "";
  showOnCells(status);
  showKept();
  if (status !== "online") return;
  guard(sendKept);
  touchConversationList(); // titles and order may have changed meanwhile
}
