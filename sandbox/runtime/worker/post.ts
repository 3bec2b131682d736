// What the Worker says to the control thread. postMessage is bound here, as this module
// loads (worker/main.ts: before any user code can run): code that later replaces
// globalThis.postMessage (Python reaches it through `js`) changes nothing of what the
// Worker sends. Code can still post messages of its own: the control thread reads all of
// them as the user's word (messages.ts, Said).

import type { FromWorker } from "../messages.ts";

const postRaw = globalThis.postMessage.bind(globalThis);

export function post(m: FromWorker, transfer: Transferable[] = []) {
  postRaw(m, transfer);
}
