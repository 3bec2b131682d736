// What the page knows: the one shared state of the client.

export const state = {
  token: localStorage.getItem("sandchat.token") || "", // a pasted API token; none with a browser session
  csrf: "", // the browser session's CSRF token, sent on what changes something

  me: null,
  catalogue: [],
  agents: [],
  convs: [],
  search: null, // { q, hits } while the list shows a search's hits
  conv: null, // the open conversation
  at: null, // a message of it to show once its picture is drawn (a search hit)
  seq: 0, // last event seq seen for it
  loading: false, // until the picture is drawn (true, then the REST load under way): events wait in pending
  pending: [],
  turn: null, // id of its running turn
  resumed: null, // the running turn whose events were replayed when it was opened
  resuming: false, // until the server answers that replay's subscription
  replaySince: null, // the since of that subscription, until it is answered
  ws: null,
  retry: 0,
  agent: null, // the agent being edited (a copy)
  agentSaved: null,
  showAll: false,
  blobs: new Map(), // file id → promise of its object URL
  ended: new Set(), // turns seen ending
  stopping: null, // turn the user asked to stop
  files: [], // the open conversation's files
};
