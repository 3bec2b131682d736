// What the server says over the socket, to where it belongs: toasts, the open
// conversation's events (held while its picture loads), the conversation list, and an
// agent's tools changed in another tab.
import { state } from "/js/state.js";
import { toast } from "/js/dom.js";
import { guard, quiet } from "/js/api.js";
import { onFrame } from "/js/socket.js";
import { convTitle, loadConversation, touchConversationList } from "/js/chat.js";
import { applyEvent } from "/js/messages.js";
import { agentToolsChanged } from "/js/tools.js";

export function startLive() { onFrame(onEvent); }

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
    if (!ev.data?.recovered || (!state.seq && !replayed)) quiet(loadConversation);
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
