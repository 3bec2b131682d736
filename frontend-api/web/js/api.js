// The v1 API: requests with the token, problems as APIError. A refused token is told
// upward by the window's "sandchat:unauthorized" event (app.js signs out): this module,
// at the bottom, imports no view.
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

export async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + state.token };
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) { headers["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  const res = await fetch("/api/v1" + path, { method, headers, body: payload });
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { detail: text }; } }
  if (res.status === 401) {
    dispatchEvent(new CustomEvent(UNAUTHORIZED, { detail: "Your token was refused; sign in again." }));
    throw new APIError(401, data);
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

export async function guard(fn) {
  try { return await fn(); } catch (e) { if (!(e instanceof APIError && e.status === 401)) toast(e.message, "error"); }
}
