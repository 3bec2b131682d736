// Where code meets a sandbox that is off: under the answer to the latest message, why
// the code did not run, and for a user who may edit, the one click that switches the
// Python sandbox on and has that message answered again, its code run this time.
import { state } from "/js/state.js";
import { $, el } from "/js/dom.js";
import { api, guard } from "/js/api.js";
import { setRunning } from "/js/turn.js";

const SANDBOX = "pyodide_sandbox";

// The open conversation's tools, as last drawn in the toolbar.
let tools = null;
export function offerTools(list) { tools = list; updateOffer(); }

// updateOffer draws the offer, or takes it away, from what the page shows: it is drawn
// again whenever a turn starts or ends (app.js calls it on turn.js's TURN_CHANGED) and
// whenever the conversation's tools change.
export function updateOffer() {
  const list = $("messages");
  list.querySelector(":scope > li.offer")?.remove();
  const conv = state.conv;
  const sandbox = tools?.find((t) => t.id === SANDBOX);
  if (!conv || state.turn || !sandbox || sandbox.enabled) return;
  const users = list.querySelectorAll(":scope > li.msg.user");
  const user = users[users.length - 1];
  if (!user) return;
  const after = [];
  for (let n = user.nextElementSibling; n; n = n.nextElementSibling) if (!n.hidden) after.push(n);
  const cells = after.filter((n) => n.matches(".cell"));
  // Answered, and nothing ran: the message's Python, or a call the model made anyway,
  // met the sandbox off.
  if (!after.some((n) => n.matches(".msg.assistant, .cell"))) return;
  if (cells.some((c) => c.dataset.status !== "refused")) return;
  if (!cells.length && !user.querySelector("pre code.language-python")) return;

  let why, action = null;
  if (!sandbox.available) why = `The Python sandbox is unavailable here, so this code was not run: ${sandbox.unavailable_reason || "deployment policy"}`;
  else if (conv.role === "viewer") why = "The Python sandbox is off in this conversation, so this code was not run. Only its owner or an editor can switch it on.";
  else {
    why = "The Python sandbox is off in this conversation, so this code was not run.";
    action = el("button", { type: "button", className: "primary", textContent: "Turn on Python sandbox and run" });
    action.onclick = () => runWithSandbox(conv, user.dataset.msg, action);
  }
  list.append(el("li", { className: "offer", attrs: { role: "note" } }, el("span", { textContent: why }), action));
  // The working indicator stays last.
  const ind = list.querySelector(":scope > .thinking");
  if (ind) list.append(ind);
}

function runWithSandbox(conv, messageID, button) {
  button.disabled = true;
  guard(async () => {
    try {
      await api("PUT", `/conversations/${conv.id}/internal-tools/${SANDBOX}`, { enabled: true });
      const r = await api("POST", `/conversations/${conv.id}/messages/${messageID}/retry`);
      if (state.conv?.id === conv.id && !state.ended.has(r.turn_id)) setRunning(r.turn_id);
    } finally {
      button.disabled = false;
      if (!button.isConnected && !$("input").disabled) $("input").focus();
    }
  });
}
