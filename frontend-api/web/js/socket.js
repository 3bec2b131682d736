// The tab's one WebSocket: it connects, reconnects and resubscribes the open
// conversation. Every frame goes to the one handler registered with onFrame (live.js
// routes them to the views): this module imports no view. Whether the server can be
// reached is told by the window's CONNECTION event (detail: "online", "reconnecting" or
// "offline"), whenever it changes.
import { state } from "/js/state.js";
import { api, unauthorized } from "/js/api.js";

// SIGNED_OUT is the close code of a socket whose browser session ended.
const SIGNED_OUT = 4001;

export const CONNECTION = "sandchat:connection";

let handler = () => {};
let status = "online";
let retryTimer = null;

// onFrame sets what receives every frame the server sends, parsed.
export function onFrame(fn) { handler = fn; }

// connection is whether the server can be reached, as the socket last found.
export function connection() { return status; }

function setStatus(s) {
  if (s === status) return;
  status = s;
  dispatchEvent(new CustomEvent(CONNECTION, { detail: s }));
}

// opening counts connects: a ticket that comes after a newer connect began is dropped.
let opening = 0;

// ticketQuery is what the socket's address carries: nothing for a browser session,
// whose cookie goes with the socket by itself; for a pasted token, which a socket cannot
// send as a header and which must never sit in an address (proxies log them), a ticket
// that opens this one socket, once, within seconds.
async function ticketQuery() {
  if (!state.token) return "";
  const t = await api("POST", "/tickets", { use: "websocket" });
  return `?ticket=${encodeURIComponent(t.ticket)}`;
}

export async function connect() {
  clearTimeout(retryTimer);
  if (state.ws) { const old = state.ws; state.ws = null; old.close(1000); }
  const n = ++opening;
  let query;
  try { query = await ticketQuery(); } catch { query = null; }
  if (n !== opening || state.ws || !state.me) return;
  if (query === null) return retry();
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/ws${query}`);
  state.ws = ws;
  ws.onopen = () => {
    state.retry = 0;
    if (state.conv) subscribe(state.conv.id, state.replaySince ?? (state.seq || undefined));
    setStatus("online");
  };
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    handler(ev);
  };
  ws.onclose = (e) => {
    if (state.ws !== ws) return;
    state.ws = null;
    if (e.code === SIGNED_OUT) return unauthorized("You signed out of this browser session (in another tab, or it was ended).");
    retry();
  };
}

// retry connects again, soon at first. Until a socket opens the page says the server
// cannot be reached (restarting: 1012, a network gone, a server that does not answer).
function retry() {
  setStatus(navigator.onLine ? "reconnecting" : "offline");
  const delay = Math.min(5000, 500 * 2 ** state.retry++);
  clearTimeout(retryTimer);
  retryTimer = setTimeout(() => { if (!state.ws && state.me) connect(); }, delay);
}

// disconnect closes the socket for good (signing out): nothing is said about it.
export function disconnect() {
  clearTimeout(retryTimer);
  opening++;
  if (state.ws) { const ws = state.ws; state.ws = null; ws.close(1000); }
  setStatus("online");
}

// The browser knows when its network goes and comes back: the socket, which may not
// notice for a long while, is closed at once, and opened again as soon as it can be.
addEventListener("offline", () => {
  if (!state.me) return;
  clearTimeout(retryTimer);
  opening++;
  if (state.ws) { const ws = state.ws; state.ws = null; ws.close(1000); }
  setStatus("offline");
});
addEventListener("online", () => {
  if (!state.me || state.ws?.readyState === WebSocket.OPEN) return;
  setStatus("reconnecting");
  state.retry = 0;
  connect();
});

// send reports whether the frame went out: none does before the socket is open.
export function send(frame) {
  if (state.ws?.readyState !== WebSocket.OPEN) return false;
  state.ws.send(JSON.stringify(frame));
  return true;
}

export function subscribe(convID, since) {
  const f = { type: "subscribe", conversation_id: convID };
  if (since !== undefined && since !== null) f.since = since;
  return send(f);
}
