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
  const res = await fetch("/api/v1" + path, { method, headers, body: payload });
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

export async function guard(fn) {
  try { return await fn(); } catch (e) { if (!(e instanceof APIError && e.status === 401)) toast(e.message, "error"); }
}
