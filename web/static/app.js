// Baton's chat page: plain JavaScript modules, no framework, no build step, nothing fetched from elsewhere.
//
//   state.js     what the page knows, built from the transcript and the event stream (and why it cannot
//                double text: read its header)
//   view.js      the chat column, rendered from that state
//   timeline.js  the timeline of every event beside the chat
//   chats.js     the list of the chats this page may see
//   app.js       this file: where we are (URL), the HTTP API, the live stream, the buttons

import { DELTAS, EVENT_TYPES, PageState, TERMINAL } from "./state.js";
import { ChatView } from "./view.js";
import { Timeline } from "./timeline.js";
import { byId } from "./dom.js";
import { loadChats } from "./chats.js";
import { Attachments } from "./attach.js";

// ------------------------------------------------------------------ where we are

const params = new URLSearchParams(window.location.search);
const token = params.get("token") || "";
// Who decides approvals made here, for the audit trail (`tool.approved` / `tool.denied` carry it): the app
// that links to the page names its signed-in user with `&by=NAME`, as it passes `&token=`. Unset: no name.
const by = (params.get("by") || "").trim();
const runId = params.get("run");
let chatId = params.get("chat");
if (!runId && !chatId) {
  chatId = newChatId();
  params.set("chat", chatId);
  window.history.replaceState(null, "", `${window.location.pathname}?${params}`);
}
const isRun = Boolean(runId);
const ownerId = isRun ? runId : chatId;
// Relative to the page, so an app that mounts Baton under a prefix (`/baton/`) serves a working page.
const root = new URL(".", window.location.href).pathname;
const base = `${root}api/${isRun ? "runs" : "chats"}/${encodeURIComponent(ownerId)}`;

function newChatId() {
  const bytes = new Uint8Array(6);
  window.crypto.getRandomValues(bytes);
  return "chat-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const state = new PageState(isRun ? runId : null);
let stopping = false;
const view = new ChatView(state, {
  isRun,
  ownerId,
  actions: {
    retry: onRetry, decide, isStopping: () => stopping, reveal: (key) => timeline.reveal(key), fileUrl,
  },
});
const attachments = new Attachments(byId("attachments"));

/** Where a message's file is served (an <img> sends no Authorization header: the token goes in the query). */
function fileUrl(sha256) {
  return `${base}/files/${encodeURIComponent(sha256)}${token ? `?token=${encodeURIComponent(token)}` : ""}`;
}
const timeline = new Timeline({ isRun });

function render() {
  timeline.refresh(state.attempts);
  timeline.nameTurns(state.transcript);
  view.render();
}

function schedule() {
  view.schedule();
  scheduleTimeline();
}

let timelineQueued = false;
function scheduleTimeline() {
  if (timelineQueued) return;
  timelineQueued = true;
  window.requestAnimationFrame(() => {
    timelineQueued = false;
    timeline.refresh(state.attempts);
  });
}

// ------------------------------------------------------------------ HTTP

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function messageOf(data, status) {
  const d = data && (data.detail ?? data.error ?? data.message);
  if (typeof d === "string") return d;
  if (Array.isArray(d)) return d.map((x) => x.msg || JSON.stringify(x)).join("; ");
  return d ? JSON.stringify(d) : `HTTP ${status}`;
}

/** One API call; the token (when the page has one) goes in the Authorization header. */
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, messageOf(data, response.status));
  return data;
}

/** `coalesced(load)`: at most one `load()` in flight; calls meanwhile coalesce into one more after it. */
function coalesced(load) {
  let busy = false;
  let again = false;
  return async function run() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await load();
        render();
      } while (again);
    } finally {
      busy = false;
    }
  };
}

const refreshTranscript = coalesced(async () => {
  const asOf = state.applied; // the events applied before this request are reflected in its answer
  try {
    const data = await api("GET", `${base}/transcript`);
    state.setTranscript(Array.isArray(data && data.messages) ? data.messages : [], asOf);
    state.loadError = null;
  } catch (err) {
    if (err.status === 404) state.setTranscript([], asOf); // nothing recorded yet
    else state.loadError = err.message;
    if (err.status === 401) showError(NEEDS_TOKEN);
  }
});

const refreshRun = coalesced(async () => {
  try {
    state.run = await api("GET", base);
  } catch (err) {
    state.run = null;
    state.loadError = err.status === 404 ? `No run with id ${ownerId}.` : err.message;
  }
});

// ------------------------------------------------------------------ the live stream

let reconnectDelay = 1000;

function streamUrl(after) {
  const q = new URLSearchParams();
  if (token) q.set("token", token); // an EventSource cannot send an Authorization header
  if (after) q.set("after", after);
  const s = q.toString();
  return `${base}/stream${s ? "?" + s : ""}`;
}

function connect(after) {
  // The first connection has no `after`: the stream starts at the beginning of the retained history and
  // the page's live state is built from all of it (see state.js). The browser's own reconnects resend
  // Last-Event-ID by themselves; only when it gives up (an HTTP error) do we reconnect, after the last id.
  const source = new EventSource(streamUrl(after));
  setConnection("connecting");
  source.onopen = () => {
    reconnectDelay = 1000;
    setConnection("live");
  };
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED) {
      setConnection("reconnecting");
      return;
    }
    setConnection("offline");
    source.close();
    window.setTimeout(() => connect(state.lastId), reconnectDelay);
    reconnectDelay = Math.min(reconnectDelay * 2, 15000);
  };
  for (const type of [...EVENT_TYPES, ...DELTAS]) source.addEventListener(type, receive);
  source.onmessage = receive; // an unnamed message: its type is inside the data
}

function receive(msg) {
  let data;
  try {
    data = JSON.parse(msg.data);
  } catch {
    return;
  }
  if (!data || typeof data !== "object") return;
  const type = data.type || (msg.type !== "message" ? msg.type : null);
  if (!type) return;
  const ev = { ...data, id: msg.lastEventId || data.id || null };
  const changed = state.receive(type, ev);
  if (changed === null) return; // applied already
  if (DELTAS.has(type)) {
    if (changed.attempt) timeline.attempt(changed.attempt);
  } else {
    timeline.event(type, ev);
    if (TERMINAL.has(type)) stopping = false;
  }
  if (changed.transcript) refreshTranscript();
  if (changed.run) refreshRun();
  schedule();
}

function setConnection(s) {
  const el = byId("connection");
  el.dataset.state = s;
  el.querySelector(".connection-label").textContent = {
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting…",
    offline: "Offline, retrying",
  }[s];
}

// ------------------------------------------------------------------ actions

const NEEDS_TOKEN = token
  ? "The server refused this page's token (401)."
  : "This server needs its API token: open the page with &token=… in its address.";

function showError(message) {
  byId("control-error").textContent = message || "";
}

async function send(text) {
  const button = byId("send-button");
  // What the button said when it was pressed: "Interrupt and send" while a turn is under way (view.js).
  const body = button.dataset.onBusy === "interrupt" ? { text, on_busy: "interrupt" } : { text };
  button.disabled = true;
  showError("");
  try {
    if (attachments.items.length) body.files = await attachments.payload();
    const turn = await api("POST", `${base}/messages`, body);
    state.addPending(turn.turn_id, text);
    byId("composer-input").value = "";
    attachments.clear();
    render();
    loadChats(api, root, chatId, token); // a new chat joins the list, and this one moves to the top
  } catch (err) {
    showError(err.status === 401 ? NEEDS_TOKEN : err.message);
  } finally {
    button.disabled = false;
    byId("composer-input").focus();
  }
}

async function onStop() {
  stopping = true; // until the turn settles (the view hides Stop then)
  view.render();
  try {
    const out = await api("POST", `${base}/stop`);
    if (out && out.stopped === false) stopping = false;
  } catch (err) {
    stopping = false;
    showError(err.message);
  }
  view.render();
}

async function onRetry(event) {
  const button = event.currentTarget;
  button.disabled = true;
  button.textContent = "Retrying…";
  showError("");
  try {
    await api("POST", `${base}/retry`);
  } catch (err) {
    button.disabled = false;
    button.textContent = "Retry";
    showError(err.message);
  }
}

async function decide(toolUseId, approve) {
  showError("");
  try {
    await api("POST", `${base}/approvals/${encodeURIComponent(toolUseId)}`, by ? { approve, by } : { approve });
  } catch (err) {
    showError(err.message);
  }
}

// ------------------------------------------------------------------ start

/** Files join the message by the Attach button, a paste into the composer, or a drop on it. */
function wireAttaching(composer) {
  const input = byId("file-input");
  byId("attach-button").addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    attachments.add(input.files);
    input.value = ""; // the same file may be chosen again
  });
  byId("composer-input").addEventListener("paste", (e) => {
    const files = e.clipboardData && e.clipboardData.files;
    if (files && files.length) {
      e.preventDefault();
      attachments.add(files);
    }
  });
  composer.addEventListener("dragover", (e) => {
    e.preventDefault();
    composer.classList.add("is-dropping");
  });
  composer.addEventListener("dragleave", () => composer.classList.remove("is-dropping"));
  composer.addEventListener("drop", (e) => {
    e.preventDefault();
    composer.classList.remove("is-dropping");
    attachments.add(e.dataTransfer && e.dataTransfer.files);
  });
}

function start() {
  byId("owner-kind").textContent = isRun ? "run" : "chat";
  byId("owner-id").textContent = ownerId;
  byId("timeline-owner").textContent = isRun ? "run" : "chat";
  document.title = `${isRun ? "Run" : "Chat"} ${ownerId} · Baton`;
  const composer = byId("composer");
  composer.hidden = isRun; // a run is driven by its goal, not by messages
  composer.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = byId("composer-input").value;
    if (text.trim()) send(text);
  });
  byId("composer-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault(); // Enter sends; Shift+Enter is a new line
      composer.requestSubmit();
    }
  });
  byId("stop-button").addEventListener("click", onStop);
  wireAttaching(composer);
  render();
  refreshTranscript();
  if (isRun) refreshRun();
  loadChats(api, root, chatId, token);
  connect(null);
}

start();
