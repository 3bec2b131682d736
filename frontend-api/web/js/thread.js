// The shape of the message list that messages and cells both draw into: where a message
// of an agent path goes (the top list, or the body of the latest handoff block of a
// child, nested as deep as the path), who speaks for a path, the turn an element
// carries, and following the list's end (js/follow.js).
import { state } from "/js/state.js";
import { $, el } from "/js/dom.js";
import { isFollowing, follow, hold } from "/js/follow.js";

// Agent path → the body of its latest handoff block.
const containers = new Map();

export function pathKey(path) { return (path || []).join("/"); }

// forgetContainers is for a list drawn anew.
export function forgetContainers() { containers.clear(); }

// handoffBody is the body of the latest handoff block of path, if any.
export function handoffBody(path) { return containers.get(pathKey(path)); }

export function containerFor(path, turnID) {
  if (!path || path.length <= 1) return $("messages");
  let c = containers.get(pathKey(path));
  if (!c || !c.isConnected) c = handoffBlock(path, null, turnID).body;
  return c;
}

// turnOf is what an answer's element carries of its turn (versions.js shows or hides it
// with its version): the one given, else the running turn's.
export function turnOf(turnID) { return turnID ?? state.turn ?? undefined; }

export function handoffBlock(path, task, turnID) {
  const key = pathKey(path);
  const parent = containerFor(path.slice(0, -1), turnID);
  const child = path[path.length - 1];
  const status = el("span", { className: "status running", textContent: "working…" });
  const body = el("ol", { className: "handoff-body" });
  const details = el("details", { open: true }, el("summary", {}, el("span", { className: "who", textContent: `↳ ${child}` }), " ", status), task ? el("p", { className: "task", textContent: task }) : null, body);
  const block = el("li", { className: "handoff", dataset: { path: key, turn: turnOf(turnID) } }, details);
  block.statusEl = status;
  parent.append(block);
  containers.set(key, body);
  body.block = block;
  return { block, body };
}

// whoOf is who speaks for path: an agent by its name; a conversation without an agent
// has the assistant (the server's "assistant"), named as a name is.
export function whoOf(path) {
  const who = path && path.length ? path[path.length - 1] : "assistant";
  return (path?.length ?? 0) <= 1 && who === "assistant" ? "Assistant" : who;
}

// Whether the reader follows the newest output (js/follow.js).
export function nearBottom() { return isFollowing(); }

// Callers decide: they scroll only when the reader was at the end before the change,
// so someone who scrolled up to read is left where they are.
export function scrollToEnd() { follow(); }

// scrollTo shows e, and leaves the list where it is from then on.
export function scrollTo(e) { hold(e); }
