// The tab's one WebSocket: reconnects, subscriptions, events to where they belong.
import { state } from "/js/state.js";
import { toast } from "/js/dom.js";
import { guard, unauthorized } from "/js/api.js";
import { convTitle, loadConversations, loadConversation } from "/js/chat.js";
import { applyEvent } from "/js/messages.js";
import { agentToolsChanged } from "/js/tools.js";

// SIGNED_OUT is the close code of a socket whose browser session ended.
const SIGNED_OUT = 4001;

export function connect() {
  if (state.ws) { const old = state.ws; state.ws = null; old.close(1000); }
  // A browser session's cookie goes with the socket by itself; a pasted token in the
  // address, since a socket carries no header.
  const query = state.token ? `?access_token=${encodeURIComponent(state.token)}` : "";
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/ws${query}`);
  state.ws = ws;
  ws.onopen = () => {
    state.retry = 0;
    if (state.conv) subscribe(state.conv.id, state.replaySince ?? (state.seq || undefined));
  };
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    onEvent(ev);
  };
  ws.onclose = (e) => {
    if (state.ws !== ws) return;
    state.ws = null;
    if (e.code === SIGNED_OUT) return unauthorized("You signed out of this browser session (in another tab, or it was ended).");
    const delay = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(() => { if (!state.ws && state.me) connect(); }, delay);
  };
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

function onEvent(ev) {
  if (ev.type === "toast") return onToast(ev.data || {});
  if (ev.type === "error") return toast(ev.data?.message || ev.data?.detail || "Connection error", "error");
  if (ev.type === "internal_tools.updated" && !ev.conversation_id && ev.data?.agent_id) return guard(() => agentToolsChanged(ev.data.agent_id));
  if (ev.type === "internal_tools.updated" || ev.type === "turn.completed" || ev.type === "turn.failed") touchConversationList();
  if (!state.conv || ev.conversation_id !== state.conv.id) return;
  if (ev.type === "subscribed") {
    // A subscription without since delivers what happens from the moment the server
    // takes it, which may be well after it was sent: the picture is fetched once it has
    // answered. One with since that could not be replayed is fetched again too.
    const replayed = state.replaySince !== null;
    state.resuming = false;
    state.replaySince = null;
    if (!ev.data?.recovered || (!state.seq && !replayed)) guard(loadConversation);
    return;
  }
  if (state.resuming) return; // the subscription that replays a running turn brings it again
  if (state.loading) { state.pending.push(ev); return; }
  applyEvent(ev);
}

function onToast(d) {
  let msg = d.message || "";
  if (d.conversation_id && d.conversation_id !== state.conv?.id) {
    const known = state.convs.find((c) => c.id === d.conversation_id);
    const title = d.conversation_title || (known ? convTitle(known) : `conversation ${d.conversation_id}`);
    msg += ` (in “${title}”)`;
  }
  toast(msg, d.level || "success", toolChange(d));
}

// toolChange is the second line of a toggle's toast: the tool and its new state.
function toolChange(d) {
  if (!d.tool_name) return "";
  const from = { agent: " (from the agent)", default: " (the deployment default)", policy: " (deployment policy)" }[d.source] || "";
  return `${d.tool_name}: ${d.enabled ? "on" : "off"}${from}`;
}

let listTimer;
export function touchConversationList() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => guard(loadConversations), 300);
}
