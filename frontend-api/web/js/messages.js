// The message list: history, handoff blocks, and the live events that draw into it.
import { state } from "/js/state.js";
import { $, el, markdown } from "/js/dom.js";
import { containerFor, handoffBlock, handoffBody, forgetContainers, pathKey, turnOf, whoOf, nearBottom, scrollToEnd } from "/js/thread.js";
import { setRunning, showTurnEnd } from "/js/turn.js";
import { cellEl, ensureCell, appendOutput, finishCell, endOpenCells, addDisplay } from "/js/cells.js";
import { releaseBlobs, touchFiles } from "/js/files.js";
import { renderTools } from "/js/tools.js";
import { messageUpdated } from "/js/resend.js";
import { dataResult } from "/js/preview.js";
import { setVersions, showVersion } from "/js/versions.js";

function setHandoffStatus(path, status) {
  const s = handoffBody(path)?.block?.statusEl;
  if (!s) return;
  s.className = "status " + (status === "completed" ? "ok" : status === "failed" ? "failed" : "running");
  s.textContent = status === "completed" ? "done" : status === "failed" ? "failed" : "working…";
}

export function renderHistory(msgs, runs) {
  releaseBlobs();
  forgetContainers();
  $("messages").replaceChildren();
  // A run belongs to a sandbox call of the same turn with the same code, in order.
  const unused = [...runs];
  const runFor = (turnID, code) => {
    const i = unused.findIndex((r) => r.turn_id === turnID && r.code === code);
    return i < 0 ? null : unused.splice(i, 1)[0];
  };
  const calls = new Map();
  for (const m of msgs) {
    if (m.role === "user") addUserMessage(m);
    else if (m.role === "assistant") {
      addAssistantMessage(m);
      for (const c of parseCalls(m)) {
        calls.set(c.id, c);
        if (c.name === "pyodide_sandbox") {
          const run = runFor(m.turn_id, c.arguments?.code);
          // A run is recorded as pending before it starts: that one is still going, and
          // its cell goes on with the live events.
          if (run && run.status !== "pending") finishCell(c.id, { ...run, execution_id: run.id });
        }
      }
    } else if (m.role === "tool") addToolResult(m, calls.get(m.tool_call_id));
  }
  if (!msgs.length) $("messages").append(el("li", { className: "empty", textContent: "Say hello, or send Python in a ```python block." }));
  showVersions();
}

// showVersions shows, under each user message, its current answer version only.
export function showVersions() { $("messages").querySelectorAll(":scope > li.msg.user").forEach(showVersion); }

function parseCalls(m) {
  let calls = m.tool_calls;
  if (typeof calls === "string") { try { calls = JSON.parse(calls); } catch { calls = []; } }
  return (calls || []).map((c) => {
    let args = c.arguments;
    if (typeof args === "string") { try { args = JSON.parse(args); } catch { args = {}; } }
    return { ...c, arguments: args || {} };
  });
}

function messageEl(id) { return id ? $("messages").querySelector(`[data-msg="${id}"]`) : null; }

export function addUserMessage(m) {
  if (messageEl(m.id)) return;
  $("messages").querySelector(":scope > li.empty")?.remove();
  const li = el("li", { className: "msg user", dataset: { msg: String(m.id), author: String(m.user_id ?? "") } },
    el("div", { className: "who", textContent: m.user_id === state.me?.id ? "You" : "User" }), markdown(m.content));
  li.raw = m.content; // what Edit starts from
  $("messages").append(li);
  setVersions(li, m);
}

// An assistant message: its text (when any), then a code cell per sandbox call and a
// nested block per handoff. A streamed draft of the same step is replaced.
function addAssistantMessage(m, draftKey) {
  const box = containerFor(m.agent_path, m.turn_id);
  const draft = draftKey ? box.querySelector(`:scope > [data-draft="${CSS.escape(draftKey)}"]`) : null;
  // Already drawn from the REST history: a draft streamed again from held events goes.
  if (messageEl(m.id)) { draft?.remove(); return; }
  let li = null;
  if (m.content) {
    li = el("li", { className: "msg assistant", dataset: { msg: String(m.id), turn: turnOf(m.turn_id) } },
      el("div", { className: "who", textContent: whoOf(m.agent_path) }), markdown(m.content));
  }
  if (draft) { if (li) draft.replaceWith(li); else draft.remove(); } else if (li) box.append(li);
  if (!li) box.append(el("li", { hidden: true, dataset: { msg: String(m.id) } }));
  for (const c of parseCalls(m)) {
    if (c.name === "pyodide_sandbox") ensureCell(c.id, c.arguments.code, m.agent_path, m.turn_id);
    else if (c.name === "delegate") ensureHandoff([...(m.agent_path || []), c.arguments.agent], c.arguments.task, m.turn_id);
  }
}

function ensureHandoff(path, task, turnID) {
  const existing = handoffBody(path);
  // A second handoff to the same child is a new block.
  if (existing?.isConnected && existing.block && !existing.block.dataset.done) return existing;
  return handoffBlock(path, task, turnID).body;
}

function addToolResult(m, call) {
  let r;
  try { r = JSON.parse(m.content); } catch { r = { status: "", message: m.content }; }
  if (call?.name === "describe_file" || call?.name === "preview_rows" || (r.file !== undefined && r.summary !== undefined)) {
    dataResult(containerFor(m.agent_path, m.turn_id), m, r, call);
    const drawn = $("messages").querySelector(`:scope > [data-result="${m.id}"]`);
    if (drawn && m.turn_id) drawn.dataset.turn = String(m.turn_id);
    return;
  }
  if (call?.name === "delegate" || r.agent) {
    const path = [...(m.agent_path || []), r.agent || call?.arguments?.agent];
    setHandoffStatus(path, r.status);
    const body = handoffBody(path);
    if (body?.block) body.block.dataset.done = "1";
    return;
  }
  const cell = cellEl(m.tool_call_id);
  if (cell && cell.dataset.done) return;
  if (!cell) ensureCell(m.tool_call_id, call?.arguments?.code || "", m.agent_path, m.turn_id);
  finishCell(m.tool_call_id, {
    status: r.status, stdout: r.stdout || "", stderr: r.stderr || "", result: r.result,
    error: r.error || (r.status === "refused" ? { type: "Refused", message: r.message } : null), artifacts: [],
  });
}

export function applyEvent(ev) {
  if (ev.conversation_id !== state.conv?.id) return;
  if (ev.seq) {
    if (state.seq && ev.seq <= state.seq) return; // already seen (replay overlap)
    state.seq = ev.seq;
  }
  const d = ev.data || {};
  const near = nearBottom();
  switch (ev.type) {
    case "internal_tools.updated": renderTools(d.tools); break;
    case "turn.started": if (!state.ended.has(d.turn_id)) setRunning(d.turn_id); break;
    case "message.created":
      if (d.message?.role === "user") addUserMessage(d.message);
      else if (d.message?.role === "tool") addToolResult(d.message, findCall(d.message.tool_call_id));
      break;
    case "message.updated": if (d.message?.role === "user") messageUpdated(d.message); break;
    case "message.delta": streamDraft(`${d.turn_id}:${pathKey(ev.agent_path)}:${d.step}`, ev.agent_path, d.text, d.turn_id); break;
    case "message.completed":
      if (d.message) addAssistantMessage(d.message, `${d.message.turn_id}:${pathKey(d.message.agent_path)}:${draftStep(d.message)}`);
      break;
    case "tool.started": {
      ensureCell(d.tool_call_id, d.code, ev.agent_path, d.turn_id);
      break;
    }
    case "tool.output": {
      const cell = cellEl(d.tool_call_id) || ensureCell(d.tool_call_id, "", ev.agent_path, turnOf(d.turn_id));
      appendOutput(cell, d.text, d.stream);
      break;
    }
    case "tool.display": {
      const cell = cellEl(d.tool_call_id) || ensureCell(d.tool_call_id, "", ev.agent_path, d.turn_id);
      addDisplay(cell, d);
      break;
    }
    case "tool.completed": {
      const cell = ensureCell(d.tool_call_id, d.code || "", ev.agent_path, d.turn_id);
      if (d.status === "refused" && state.stopping === d.turn_id) {
        // Stopped by the user: keep what it printed, say so.
        cell.dataset.done = "1";
        cell.statusEl.className = "status failed";
        cell.statusEl.textContent = "stopped";
      } else finishCell(d.tool_call_id, d.status === "refused" ? { ...d, error: { type: "Not run", message: d.error } } : d);
      if (d.artifacts?.length || d.displays?.some((x) => x.image)) touchFiles(); // new files of the run
      break;
    }
    case "agent.handoff":
      if (d.status === "started") ensureHandoff(ev.agent_path, d.task, d.turn_id);
      else {
        setHandoffStatus(ev.agent_path, d.status);
        const body = handoffBody(ev.agent_path);
        if (body?.block) body.block.dataset.done = "1";
      }
      break;
    case "turn.completed": case "turn.failed":
      state.ended.add(d.turn_id);
      $("messages").querySelectorAll("[data-draft]").forEach((e) => e.classList.remove("streaming"));
      endOpenCells(d.status === "cancelled" ? "stopped" : "interrupted");
      // The note first: Regenerate, drawn as the turn ends, goes under it, as after a reload.
      if (ev.type === "turn.failed") showTurnEnd(d.status, d.error, d.turn_id);
      setRunning(null);
      break;
  }
  if (near) scrollToEnd();
}

// Drafts are keyed by step; a completed message finds the draft of its own step, the
// newest one of its path.
const draftSteps = new Map();
function draftStep(m) { return draftSteps.get(`${m.turn_id}:${pathKey(m.agent_path)}`) ?? 0; }

function streamDraft(key, path, text, turnID) {
  const [turn, p, step] = key.split(":");
  draftSteps.set(`${turn}:${p}`, Number(step));
  const box = containerFor(path, turnID);
  let li = box.querySelector(`:scope > [data-draft="${CSS.escape(key)}"]`);
  if (!li) {
    li = el("li", { className: "msg assistant streaming", dataset: { draft: key, turn: turnOf(turnID) } },
      el("div", { className: "who", textContent: whoOf(path) }), el("div", { className: "md" }));
    li.raw = "";
    box.append(li);
  }
  li.raw += text;
  li.querySelector(".md").replaceWith(markdown(li.raw));
}

function findCall(callID) {
  // Calls are only needed to tell handoff results from cells; cells carry data-call.
  return cellEl(callID) ? { name: "pyodide_sandbox" } : null;
}
