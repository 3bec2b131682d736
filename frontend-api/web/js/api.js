// The v1 API: requests with the page's credentials, problems as APIError. A refused
// sign-in is told upward by the window's "sandchat:unauthorized" event (app.js signs
// out): this module, at the bottom, imports no view.
import { state } from "/js/state.js";
import { toast } from "/js/dom.js";

export const UNAUTHORIZED = "sandchat:unauthorized";

export class APIError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// authHeaders are a request's credentials: a pasted API token; or, with the browser
// session's cookie (which the browser sends by itself), the session's CSRF token on
// whatever changes something.
export function authHeaders(method = "GET") {
  if (state.token) return { Authorization: "Bearer " + state.token };
  return method === "GET" || method === "HEAD" || !state.csrf ? {} : { "X-CSRF-Token": state.csrf };
}

// unauthorized tells the page its sign-in was refused, in words for the sign-in page.
export function unauthorized(message) {
  dispatchEvent(new CustomEvent(UNAUTHORIZED, { detail: message }));
}

export async function api(method, path, body) {
  const headers = authHeaders(method);
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) { headers["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  let res;
  try {
    res = await fetch("/api/v1" + path, { method, headers, body: payload });
  } catch {
    // The request never got an answer: the browser is offline, or the server is down
    // or restarting. Said as a sentence, not as the browser's "Failed to fetch".
    throw new APIError(0, { detail: navigator.onLine ? "Can't reach the server; check that it is running and try again." : "You are offline; try again once you are back online." });
  }
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { detail: text }; } }
  if (res.status === 401) {
    // A sign-in's own answer says what went wrong with it (a spent link).
    unauthorized(path.startsWith("/auth/") && data?.detail ? data.detail
      : state.token ? "Your token was refused; sign in again." : "Your session has ended; sign in again.");
    throw new APIError(401, data);
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

// unreachable tells whether e is a request that did not reach a server able to answer
// it: no answer at all, or 503 (shutting down, a dependency away). Trying it again
// later may work.
export function unreachable(e) { return e instanceof APIError && (e.status === 0 || e.status === 503); }

export async function guard(fn) {
  try { return await fn(); } catch (e) { if (!(e instanceof APIError && e.status === 401)) toast(e.message, "error"); }
}

// quiet runs a refresh the page makes by itself as guard does, but says nothing when
// the server could not be reached: the header says so already (js/connection.js), and
// the page reads again what it shows once the server answers.
export async function quiet(fn) {
  try { return await fn(); } catch (e) { if (!unreachable(e)) return guard(() => { throw e; }); }
}
