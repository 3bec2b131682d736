// Conversations: the list, opening and closing one, its header, loading its picture,
// and sending a message.
import { state } from "/js/state.js";
import { $, el, toast, enterSends } from "/js/dom.js";
import { api, guard, quiet, unreachable } from "/js/api.js";
import { send, subscribe, connection } from "/js/socket.js";
import { scrollToEnd, scrollTo } from "/js/thread.js";
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
  if (state.search) return; // the list shows a search's hits (js/search.js) until it is cleared
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

// With no conversation open the message box is ready all the same: sending starts a new
// chat, with the agent chosen in the list's picker (or none).
export function closeConversation() {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  state.conv = null;
  state.turn = null;
  $("conv-title").textContent = "New chat";
  $("conv-agent-name").hidden = true;
  $("messages").replaceChildren(el("li", { className: "empty", textContent: "Type a message to start a new chat, or pick one from the list." }));
  $("attachments").replaceChildren();
  $("turn-status").textContent = "";
  document.title = "sandchat";
  for (const id of ["rename", "delete-conv", "attach", "tools-button", "files-button"]) $(id).disabled = true;
  for (const id of ["input", "send"]) $(id).disabled = false;
  $("input").placeholder = placeholder("owner");
  closePopup(false);
  showToolsState(null);
  closeFiles(false);
  renderFiles([]);
  setRunning(null);
  renderConversationList();
}

// placeholder is what the message box says to someone of role.
function placeholder(role) {
  return role === "viewer" ? "You can read this conversation but not write in it." :
    enterSends() ? "Message — Enter sends, Shift+Enter is a new line. Put Python in a ```python block." : "Message — put Python in a ```python block.";
}

// openConversation opens conversation id; at, when given, is a message to show (a
// search hit) instead of the end.
export async function openConversation(id, at) {
  if (state.conv) send({ type: "unsubscribe", conversation_id: state.conv.id });
  let conv;
  try { conv = await api("GET", `/conversations/${id}`); } catch (e) {
    toast(e.message, "error");
    location.hash = "#/";
    return;
  }
  state.conv = conv;
  state.at = at || null;
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
  $("input").placeholder = placeholder(conv.role);
  // New chat, from here, starts with this conversation's agent.
  const agent = conv.agent_id ? String(conv.agent_id) : "";
  if ([...$("conv-agent").options].some((o) => o.value === agent)) $("conv-agent").value = agent;
  renderConversationList();
  renderFiles([]); // the last conversation's, until this one's arrive
  // Subscribe first and hold its events until the REST picture is drawn, so nothing
  // that happens in between is lost: the picture is drawn when the server answers the
  // subscription (see onEvent). With no socket open yet it is drawn now, and again when
  // the socket opens and subscribes.
  state.loading = true;
  if (!subscribe(conv.id)) await loadConversation();
  if (!at) $("input").focus();
}

// showMessage brings message id of the open conversation into view and gives it the
// focus, marked as what the search found, once its picture is drawn.
export function showMessage(id) {
  state.at = id;
  if (!state.loading) showAt();
}

function showAt() {
  const id = state.at;
  state.at = null;
  const li = id && $("messages").querySelector(`li[data-msg="${id}"]`);
  if (!li) return false;
  $("messages").querySelectorAll(".found").forEach((e) => e.classList.remove("found"));
  li.classList.add("found");
  li.tabIndex = -1;
  scrollTo(li);
  li.focus({ preventScroll: true });
  return true;
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
  let mine = false;
  try {
    const [msgs, runs, tools, files, turns] = await Promise.all([
      api("GET", `/conversations/${conv.id}/messages`),
      api("GET", `/conversations/${conv.id}/sandbox/executions`).catch(() => []),
      api("GET", `/conversations/${conv.id}/internal-tools`),
      api("GET", `/conversations/${conv.id}/files`).catch(() => []),
      api("GET", `/conversations/${conv.id}/turns`).catch(() => []),
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
    // How each turn that did not complete ended, under what it drew: the last one's
    // as it is now, earlier ones' as the list says.
    const ended = new Map(turns.filter((t) => t.status !== "completed" && t.status !== "running").map((t) => [t.id, t]));
    if (turn && turn.status !== "completed" && turn.status !== "running") ended.set(turn.id, turn);
    else if (turn) ended.delete(turn.id);
    for (const t of ended.values()) showTurnEnd(t.status, t.error, t.id);
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
    if ((mine = current())) {
      state.loading = false;
      const pending = state.pending;
      state.pending = [];
      pending.forEach(applyEvent);
    }
  }
  // A search hit is shown where it is; otherwise the list goes to its end.
  if (!(mine && state.at && showAt())) scrollToEnd();
}

export async function sendMessage() {
  const content = $("input").value;
  if (!content.trim() || state.conv?.role === "viewer" || sending) return;
  if (state.turn) {
    // One turn at a time. While the server cannot be reached, the one shown as running
    // may be over: the message waits for the page to know, and goes out after it.
    if (connection() !== "online") keep(content);
    return;
  }
  sending = true;
  $("send").disabled = true;
  try { await deliver(content); } catch (e) {
    if (!unreachable(e)) throw e;
    keep(content);
  } finally {
    sending = false;
    $("send").disabled = false;
  }
}

let sending = false;

// deliver sends content to the open conversation, or to a new one (the one New chat is
// making, if it is under way).
async function deliver(content) {
  if (creating) await creating;
  if (!state.conv) await newConversation();
  const conv = state.conv;
  const loading = state.loading;
  const started = await api("POST", `/conversations/${conv.id}/messages`, { content });
  $("input").value = "";
  if (state.conv?.id !== conv.id) return;
  addUserMessage(started.message);
  // A load in flight read the history before this message and would draw it away:
  // a newer load, which has it, draws instead (the newest load wins).
  if (loading || state.loading) loadConversation();
  // A quick turn may have ended (over the socket) before this answer arrived.
  if (!state.ended.has(started.turn_id)) setRunning(started.turn_id);
  scrollToEnd();
  if (!state.conv.title) touchConversationList();
}

// newConversation makes and opens a new conversation with the agent chosen in the
// list's picker: New chat, or a message typed with none open. A message sent while it
// is under way goes to it (deliver).
let creating = null;
export function newConversation() {
  creating ??= (async () => {
    try {
      const agent = $("conv-agent").value;
      const c = await api("POST", "/conversations", agent ? { agent_id: Number(agent) } : {});
      await openConversation(c.id);
      if (state.conv?.id !== c.id) throw new Error("The new conversation could not be opened.");
      location.hash = `#/c/${c.id}`; // already open: the router leaves it as it is
      guard(loadConversations);
    } finally { creating = null; }
  })();
  return creating;
}

// A message that did not reach the server stays in the box, the page says so, and it is
// sent once the server answers again (sendKept): when the socket opens again (and the
// turn that was running has ended), or, if the socket never went (the server answered
// 503), a little later.
let kept = null; // { conv, content, after: the newest message drawn when it was kept, tries }
let keptTimer = null;

function keep(content) {
  const tries = kept && kept.content === content ? kept.tries + 1 : 0;
  kept = { conv: state.conv?.id ?? null, content, after: kept?.after ?? newestMessage(), tries };
  showKept();
  clearTimeout(keptTimer);
  if (connection() === "online") keptTimer = setTimeout(() => guard(sendKept), Math.min(30000, 3000 * 2 ** tries));
}

export function showKept() {
  $("send-note").textContent = !kept ? "" : connection() === "offline" || !navigator.onLine ?
    "You are offline; your message is kept and will be sent when you are back online." :
    "Can't reach the server; your message is kept and will be sent when it answers.";
}

function newestMessage() {
  return Math.max(0, ...[...$("messages").querySelectorAll("li[data-msg]")].map((e) => Number(e.dataset.msg) || 0));
}

// sendKept sends the kept message, as the box holds it now: its writer may have changed
// it, cleared it or gone to another conversation meanwhile. A message whose answer was
// lost may have arrived all the same: it is not sent twice.
export async function sendKept() {
  if (!kept || sending || state.turn || connection() !== "online") return;
  const k = kept;
  clearTimeout(keptTimer);
  const content = $("input").value;
  if (!content.trim() || (state.conv?.id ?? null) !== k.conv) { kept = null; showKept(); return; }
  sending = true;
  $("send").disabled = true;
  try {
    if (k.conv && content === k.content) {
      const msgs = await api("GET", `/conversations/${k.conv}/messages`);
      if (msgs.some((m) => m.role === "user" && m.id > k.after && m.user_id === state.me?.id && m.content === content)) {
        kept = null;
        if ($("input").value === content) $("input").value = "";
        if (state.conv?.id === k.conv) loadConversation();
        return;
      }
    }
    kept = null;
    await deliver(content);
  } catch (e) {
    if (!unreachable(e)) throw e;
    kept = k;
    keep(content);
  } finally {
    sending = false;
    $("send").disabled = false;
    showKept();
  }
}

// touchConversationList reads the list again soon: titles and order change as turns
// end, and several changes close together cost one read.
let listTimer;
export function touchConversationList() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => quiet(loadConversations), 300);
}
