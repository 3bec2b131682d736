// The tab's one WebSocket: it connects, reconnects and resubscribes the open
// conversation. Every frame goes to the one handler registered with onFrame (live.js
// routes them to the views): this module imports no view.
import { state } from "/js/state.js";
import { api, unauthorized } from "/js/api.js";

// SIGNED_OUT is the close code of a socket whose browser session ended.
const SIGNED_OUT = 4001;

let handler = () => {};

// onFrame sets what receives every frame the server sends, parsed.
export function onFrame(fn) { handler = fn; }

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

function retry() {
  const delay = Math.min(10000, 500 * 2 ** state.retry++);
  setTimeout(() => { if (!state.ws && state.me) connect(); }, delay);
}

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
