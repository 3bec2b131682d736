// Conversations: the list, opening and closing one, its header, loading its picture,
// and sending a message.
import { state } from "/js/state.js";
import { $, el, toast, enterSends } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { send, subscribe } from "/js/socket.js";
import { scrollToEnd } from "/js/thread.js";
import { setRunning, showTurnEnd } from "/js/turn.js";
import { renderHistory, addUserMessage, applyEvent, showVersions } from "/js/messages.js";
import { endOpenCells } from "/js/cells.js";
import { releaseBlobs, renderFiles, closeFiles } from "/js/files.js";
import { renderTools, showToolsState, closePopup } from "/js/tools.js";

export function convTitle(c) { return c.title || "New chat"; }

function agentName(id) { return state.agents.find((a) => a.id === id)?.name; }

// With a ``` block left open, Enter is a new line of its code. Any ``` counts, not only
// one that starts a line: "@helper ```python" opens one too.
export function inOpenFence(input) {
  return (input.value.match(/```/g) || []).length % 2 === 1;
}

export async function loadConversations() {
  state.convs = await api("GET", "/conversations");
  const open = state.convs.find((c) => c.id === state.conv?.id);
  // The open conversation is updated in place: what is under way for it (a run fetched
  // whole, a file list, a preview) checks that it is still the one open by identity.
  if (open) { Object.assign(state.conv, open); renderHeader(); }
  renderConversationList();
}

export function renderConversationList() {
  const list = $("convs");
  if (!state.convs.length) { list.replaceChildren(el("li", { className: "empty", textContent: "No conversations yet." })); return; }
  list.replaceChildren(...state.convs.map((c) => {
    const agent = c.agent_id ? agentName(c.agent_id) : null;
    return el("li", {},
      el("a", {
        href: `#/c/${c.id}`, className: "nav-item", dataset: { conv: String(c.id) },
        attrs: { "aria-current": state.conv?.id === c.id ? "page" : null },
      }, el("span", { className: "nav-title", textContent: convTitle(c) }), agent ? el("small", { textContent: agent }) : null));
  }));
}

export function closeConversation() {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  state.conv = null;
  state.turn = null;
  $("conv-title").textContent = "Select or start a conversation";
  $("conv-agent-name").hidden = true;
  $("messages").replaceChildren(el("li", { className: "empty", textContent: "Pick a conversation, or choose an agent and start a new chat." }));
  $("attachments").replaceChildren();
  $("turn-status").textContent = "";
  document.title = "sandchat";
  for (const id of ["rename", "delete-conv", "input", "send", "attach", "tools-button", "files-button"]) $(id).disabled = true;
  closePopup(false);
  showToolsState(null);
  closeFiles(false);
  renderFiles([]);
  setRunning(null);
  renderConversationList();
}

export async function openConversation(id) {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  let conv;
  try { conv = await api("GET", `/conversations/${id}`); } catch (e) {
    toast(e.message, "error");
    location.hash = "#/";
    return;
  }
  state.conv = conv;
  state.seq = 0;
  state.pending = [];
  state.resumed = null;
  state.resuming = false;
  state.replaySince = null;
  releaseBlobs(); // the last conversation's images
  closePopup(false);
  closeFiles(false);
  renderHeader();
  for (const b of ["rename", "delete-conv", "input", "send", "attach", "tools-button", "files-button"]) $(b).disabled = false;
  // A viewer reads along: nothing to send, switch or rename.
  for (const b of ["rename", "delete-conv", "input", "send", "attach"]) if (conv.role === "viewer") $(b).disabled = true;
  $("delete-conv").hidden = conv.role !== "owner";
  $("input").placeholder = conv.role === "viewer" ? "You can read this conversation but not write in it." :
    enterSends() ? "Message — Enter sends, Shift+Enter is a new line. Put Python in a ```python block." : "Message — put Python in a ```python block.";
  renderConversationList();
  renderFiles([]); // the last conversation's, until this one's arrive
  // Subscribe first and hold its events until the REST picture is drawn, so nothing
  // that happens in between is lost: the picture is drawn when the server answers the
  // subscription (see onEvent). With no socket open yet it is drawn now, and again when
  // the socket opens and subscribes.
  state.loading = true;
  if (!subscribe(conv.id)) await loadConversation();
  $("input").focus();
}

export function renderHeader() {
  const c = state.conv;
  $("conv-title").textContent = convTitle(c);
  document.title = `${convTitle(c)} — sandchat`;
  const name = c.agent_id ? agentName(c.agent_id) || `agent ${c.agent_id}` : null;
  $("conv-agent-name").hidden = !name;
  $("conv-agent-name").textContent = name ? `with ${name}` : "";
}

export async function loadConversation() {
  const conv = state.conv;
  // Loads may overlap (one when the socket opens, one when the conversation does): the
  // newest draws the picture and releases the held events.
  const load = {};
  state.loading = load;
  const current = () => state.conv?.id === conv.id && state.loading === load;
  try {
    const [msgs, runs, tools, files] = await Promise.all([
      api("GET", `/conversations/${conv.id}/messages`),
      api("GET", `/conversations/${conv.id}/sandbox/executions`).catch(() => []),
      api("GET", `/conversations/${conv.id}/internal-tools`),
      api("GET", `/conversations/${conv.id}/files`).catch(() => []),
    ]);
    // The turn that answers the latest message as shown: its current version (a retry
    // that has written nothing yet is one), else the last turn that wrote.
    const asked = [...msgs].reverse().find((m) => m.role === "user");
    const lastTurn = asked?.answer_turn_id ?? [...msgs].reverse().find((m) => m.turn_id)?.turn_id;
    const turn = lastTurn ? await api("GET", `/conversations/${conv.id}/turns/${lastTurn}`) : null;
    if (!current()) return;
    renderTools(tools);
    renderFiles(files);
    // A turn still running is drawn from its events, replayed from its start: the
    // output its cells printed before this page subscribed is in them, and nowhere else.
    // Once per turn: when its events were pruned, the next picture is the REST one. The
    // message that started it stays: the replay may wait on a slow subscription, and
    // brings it again only as a message already shown.
    const replay = turn?.status === "running" && turn.started_seq && state.resumed !== turn.id;
    renderHistory(replay ? msgs.filter((m) => m.turn_id !== turn.id || m.role === "user") : msgs, runs);
    setRunning(null);
    let running = null;
    if (turn?.status === "running") running = turn.id;
    else if (turn && turn.status !== "completed") showTurnEnd(turn.status, turn.error, turn.id);
    showVersions(); // the note of a turn whose answer is not the current version
    endOpenCells("did not finish", running);
    setRunning(running);
    if (replay) {
      state.resumed = turn.id;
      state.pending = []; // the replay brings them again, in order
      state.seq = turn.started_seq - 1;
      state.replaySince = state.seq; // also for a socket that opens later
      // Until the server answers this subscription, what comes is from the old one.
      state.resuming = subscribe(conv.id, state.replaySince);
    }
  } finally {
    if (current()) {
      state.loading = false;
      const pending = state.pending;
      state.pending = [];
      pending.forEach(applyEvent);
    }
  }
  scrollToEnd();
}

export async function sendMessage() {
  const content = $("input").value;
  if (!content.trim() || !state.conv) return;
  $("send").disabled = true;
  try {
    const loading = state.loading;
    const started = await api("POST", `/conversations/${state.conv.id}/messages`, { content });
    $("input").value = "";
    addUserMessage(started.message);
    // A load in flight read the history before this message and would draw it away:
    // a newer load, which has it, draws instead (the newest load wins).
    if (loading || state.loading) loadConversation();
    // A quick turn may have ended (over the socket) before this answer arrived.
    if (!state.ended.has(started.turn_id)) setRunning(started.turn_id);
    scrollToEnd();
    if (!state.conv.title) touchConversationList();
  } finally { $("send").disabled = false; }
}

// touchConversationList reads the list again soon: titles and order change as turns
// end, and several changes close together cost one read.
let listTimer;
export function touchConversationList() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => guard(loadConversations), 300);
}
