/* Baton's chat page: plain JavaScript, no framework, no build step, nothing fetched from elsewhere.
 *
 * How the page stays correct across replays, reconnects and reloads (the one thing it must not get wrong):
 *
 *   What is shown is recomputed from two sources that never overlap for the same message:
 *     1. the transcript (GET .../transcript), the durable record, and
 *     2. live state built from the event stream, read from its BEGINNING on every page load (no
 *        `after` id), every event and text delta in order.
 *   Live text is stored per (turn epoch, message_id, attempt) with each delta at its own `index`, so a
 *   delta applied twice lands in the same slot, and the shown text is the concatenation of the attempts
 *   not discarded by a `turn.retry` / `run.step` with `discarded: true`. A live message is hidden as soon
 *   as the transcript holds that message_id, or once the transcript was fetched after the turn settled;
 *   from then on only the transcript's copy is shown. Nothing is ever "appended to what is on screen":
 *   a reload starts from empty state and replays the same stream, so it cannot double text, and the
 *   browser's own EventSource reconnect (Last-Event-ID) adds only what came after; stream ids already
 *   applied are skipped anyway.
 */
"use strict";

(function () {
  // ---------------------------------------------------------------- where we are

  const params = new URLSearchParams(window.location.search);
  const token = params.get("token") || "";
  const runId = params.get("run");
  let chatId = params.get("chat");
  if (!runId && !chatId) {
    chatId = newChatId();
    params.set("chat", chatId);
    window.history.replaceState(null, "", `${window.location.pathname}?${params}`);
  }
  const isRun = Boolean(runId);
  const ownerId = isRun ? runId : chatId;
  const base = `/api/${isRun ? "runs" : "chats"}/${encodeURIComponent(ownerId)}`;

  function newChatId() {
    const bytes = new Uint8Array(6);
    window.crypto.getRandomValues(bytes);
    return "chat-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Event types the stream sends (SSE `event:` is the type, so each needs its own listener).
  const EVENT_TYPES = [
    "turn.queued", "turn.started", "turn.retry", "turn.resumed", "turn.completed", "turn.failed",
    "turn.stopped", "tool.called", "tool.result", "tool.approval_requested", "tool.approved",
    "tool.denied", "run.started", "run.step", "run.interrupted", "run.resumed", "run.completed",
    "run.failed", "run.stopped",
  ];
  const TERMINAL = new Set([
    "turn.completed", "turn.failed", "turn.stopped", "run.completed", "run.failed", "run.stopped",
  ]);
  // Events after which the transcript has changed (each is written in the same batch as its messages).
  const REFRESHES_TRANSCRIPT = new Set([
    ...TERMINAL, "turn.started", "turn.retry", "turn.resumed", "run.started", "run.step",
    "run.interrupted", "run.resumed", "tool.approval_requested",
  ]);
  const ACTIVE = new Set(["queued", "running", "waiting"]);

  // ---------------------------------------------------------------- state

  const state = {
    transcript: [],
    transcriptAsOf: -1, // value of `applied` when the shown transcript was requested
    applied: 0, // events applied so far: a local clock ordering events against transcript fetches
    seen: new Set(), // stream ids already applied
    lastId: null,
    turns: new Map(), // turn key (turn_id, or the run id) -> Turn
    turnOrder: [],
    live: new Map(), // live key -> LiveMessage
    liveItems: [], // what the live area shows, in order: {kind: "text"|"tool"|"approval", key, turnKey}
    tools: new Map(), // tool_use_id -> {name, input, status, isError}
    approvals: new Map(), // tool_use_id -> {name, input, decision, reason}
    pending: [], // messages posted but not yet in the transcript: {turnId, text}
    run: null, // GET /api/runs/{id}
    steps: [], // run.step events
    transcriptIds: { messages: new Set(), tools: new Set(), userTurns: new Set() },
    loadError: null,
  };

  function turnOf(key) {
    let turn = state.turns.get(key);
    if (!turn) {
      turn = { key, status: "queued", epoch: 0, failure: null, lastType: null, waiting: null };
      state.turns.set(key, turn);
      state.turnOrder.push(key);
    }
    return turn;
  }

  function latestTurn() {
    const key = state.turnOrder[state.turnOrder.length - 1];
    return key ? state.turns.get(key) : null;
  }

  // ---------------------------------------------------------------- HTTP

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function detailOf(data, status) {
    if (!data) return `HTTP ${status}`;
    const d = data.detail ?? data.error ?? data.message;
    if (typeof d === "string") return d;
    if (Array.isArray(d)) return d.map((x) => x.msg || JSON.stringify(x)).join("; ");
    return d ? JSON.stringify(d) : `HTTP ${status}`;
  }

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
    if (!response.ok) throw new ApiError(response.status, detailOf(data, response.status));
    return data;
  }

  // One transcript fetch at a time; triggers that arrive meanwhile coalesce into one more fetch.
  let transcriptBusy = false;
  let transcriptAgain = false;
  async function refreshTranscript() {
    if (transcriptBusy) {
      transcriptAgain = true;
      return;
    }
    transcriptBusy = true;
    try {
      do {
        transcriptAgain = false;
        const asOf = state.applied;
        try {
          const data = await api("GET", `${base}/transcript`);
          state.transcript = Array.isArray(data && data.messages) ? data.messages : [];
          state.loadError = null;
        } catch (err) {
          if (err.status === 404) state.transcript = []; // a chat with no message yet
          else state.loadError = err.message;
        }
        state.transcriptAsOf = asOf;
        indexTranscript();
        render();
      } while (transcriptAgain);
    } finally {
      transcriptBusy = false;
    }
  }

  let runBusy = false;
  let runAgain = false;
  async function refreshRun() {
    if (!isRun) return;
    if (runBusy) {
      runAgain = true;
      return;
    }
    runBusy = true;
    try {
      do {
        runAgain = false;
        try {
          state.run = await api("GET", base);
        } catch (err) {
          state.run = null;
          state.loadError = err.status === 404 ? `No run with id ${ownerId}.` : err.message;
        }
        render();
      } while (runAgain);
    } finally {
      runBusy = false;
    }
  }

  function indexTranscript() {
    const ids = { messages: new Set(), tools: new Set(), userTurns: new Set() };
    for (const m of state.transcript) {
      if (m.message_id) ids.messages.add(m.message_id);
      if (m.role === "user" && m.turn_id) ids.userTurns.add(m.turn_id);
      for (const b of m.content || []) if (b.type === "tool_use") ids.tools.add(b.id);
    }
    state.transcriptIds = ids;
    state.pending = state.pending.filter((p) => !ids.userTurns.has(p.turnId));
  }

  // ---------------------------------------------------------------- the stream

  let source = null;
  let reconnectDelay = 1000;

  function streamUrl(after) {
    const q = new URLSearchParams();
    if (token) q.set("token", token); // an EventSource cannot send an Authorization header
    if (after) q.set("after", after);
    const s = q.toString();
    return `${base}/stream${s ? "?" + s : ""}`;
  }

  function connect(after) {
    // First connection: no `after`, so the stream starts at the beginning of the retained history (see
    // the comment at the top). The browser's own reconnects resend Last-Event-ID by themselves.
    source = new EventSource(streamUrl(after));
    setConnection("connecting");
    source.onopen = () => {
      reconnectDelay = 1000;
      setConnection("live");
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (an HTTP error answer): reconnect ourselves after the last applied id.
        setConnection("offline");
        source.close();
        window.setTimeout(() => connect(state.lastId), reconnectDelay);
        reconnectDelay = Math.min(reconnectDelay * 2, 15000);
      } else {
        setConnection("reconnecting");
      }
    };
    const onMessage = (msg) => receive(msg);
    for (const type of [...EVENT_TYPES, "text.delta"]) source.addEventListener(type, onMessage);
    source.onmessage = onMessage; // an unnamed message (type inside the data)
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
    const id = msg.lastEventId || data.id || null;
    if (id) {
      if (state.seen.has(id)) return; // already applied (a reconnect never applies an entry twice)
      state.seen.add(id);
      state.lastId = id;
    }
    apply(type, { ...data, id: id || data.id });
  }

  // ---------------------------------------------------------------- applying events

  function liveKey(turn, messageId) {
    return `${turn.key}~${turn.epoch}~${messageId}`;
  }

  function apply(type, ev) {
    state.applied += 1;
    const key = ev.turn_id || ev.run_id || (isRun ? ownerId : null);
    if (type === "text.delta") {
      applyDelta(key, ev);
      scheduleRender();
      return;
    }
    const turn = key ? turnOf(key) : null;
    if (turn) turn.lastType = type;
    switch (type) {
      case "turn.queued":
        turn.status = "queued";
        turn.failure = null;
        break;
      case "turn.started":
      case "run.started":
      case "run.resumed":
        // A new generation or a new worker: its message ids start afresh (see liveKey).
        turn.epoch += 1;
        turn.status = "running";
        turn.waiting = null;
        turn.failure = null;
        break;
      case "turn.resumed":
        turn.status = "running";
        break;
      case "turn.retry":
        discard(turn, ev);
        if (ev.max_attempts) turn.waiting = "platform_interrupt";
        break;
      case "run.step":
        state.steps.push(ev);
        if (ev.discarded) discard(turn, ev);
        break;
      case "run.interrupted":
        turn.status = "waiting";
        turn.waiting = "platform_interrupt";
        break;
      case "tool.called":
        state.tools.set(ev.tool_use_id, { name: ev.name, input: ev.input, status: "running" });
        addLiveItem("tool", ev.tool_use_id, turn);
        break;
      case "tool.result": {
        const tool = state.tools.get(ev.tool_use_id) || { name: ev.name, input: null };
        tool.status = ev.status || (ev.is_error ? "error" : "ok");
        tool.isError = Boolean(ev.is_error);
        state.tools.set(ev.tool_use_id, tool);
        break;
      }
      case "tool.approval_requested":
        state.approvals.set(ev.tool_use_id, { name: ev.name, input: ev.input, decision: null });
        if (state.tools.has(ev.tool_use_id)) state.tools.get(ev.tool_use_id).status = "awaiting approval";
        addLiveItem("approval", ev.tool_use_id, turn);
        if (turn) {
          turn.status = "waiting";
          turn.waiting = "approval";
        }
        break;
      case "tool.approved":
      case "tool.denied": {
        const a = state.approvals.get(ev.tool_use_id);
        if (a) {
          a.decision = type === "tool.approved" ? "approved" : "denied";
          a.reason = ev.reason || null;
        }
        const tool = state.tools.get(ev.tool_use_id);
        if (tool && tool.status === "awaiting approval") tool.status = type === "tool.approved" ? "running" : "denied";
        if (turn && turn.waiting === "approval") {
          turn.status = "running";
          turn.waiting = null;
        }
        break;
      }
      default:
        if (TERMINAL.has(type) && turn) settle(turn, type, ev);
    }
    timelineAdd(type, ev);
    if (REFRESHES_TRANSCRIPT.has(type)) refreshTranscript();
    if (isRun && type.startsWith("run.")) refreshRun();
    scheduleRender();
  }

  function settle(turn, type, ev) {
    turn.status = type.split(".")[1];
    turn.waiting = null;
    turn.failure = turn.status === "failed" ? { cls: ev.class, message: ev.message, retryable: ev.retryable } : null;
    if (turn.failure) turn.lastFailure = turn.failure;
    // What this generation streamed is now in the transcript (or, for a failure, deliberately not):
    // hide it once a transcript fetched after this moment is shown.
    for (const item of state.liveItems) {
      if (item.turnKey === turn.key && item.settledAt == null) item.settledAt = state.applied;
    }
    turn.epoch += 1;
  }

  function addLiveItem(kind, key, turn) {
    if (!key) return;
    state.liveItems.push({ kind, key, turnKey: turn ? turn.key : null, settledAt: null });
  }

  function applyDelta(key, ev) {
    const turn = turnOf(key);
    if (turn.status === "queued") turn.status = "running";
    turn.lastType = "text.delta";
    const k = liveKey(turn, ev.message_id);
    let live = state.live.get(k);
    if (!live) {
      live = { key: k, messageId: ev.message_id, attempts: new Map(), discarded: new Set(), firstAt: ev.at };
      state.live.set(k, live);
      addLiveItem("text", k, turn);
    }
    const attempt = Number(ev.attempt) || 0;
    if (live.discarded.has(attempt)) return; // a late delta of an attempt already thrown away
    let parts = live.attempts.get(attempt);
    if (!parts) {
      parts = [];
      live.attempts.set(attempt, parts);
    }
    parts[Number(ev.index) || 0] = ev.text || "";
    timelineDelta(live, attempt);
  }

  // Every delta of a discarded attempt comes before its retry event, so everything this message has
  // streamed so far is discarded (the event's own `attempt` too, should a late delta still arrive).
  function discard(turn, ev) {
    if (!ev.discarded || !turn) return;
    const targets = [];
    if (ev.message_id) {
      const live = state.live.get(liveKey(turn, ev.message_id));
      if (live) targets.push(live);
    } else {
      const prefix = `${turn.key}~${turn.epoch}~`;
      for (const [k, live] of state.live) if (k.startsWith(prefix)) targets.push(live);
    }
    for (const live of targets) {
      for (const attempt of live.attempts.keys()) live.discarded.add(attempt);
      if (ev.attempt != null) live.discarded.add(Number(ev.attempt));
      for (const attempt of live.discarded) timelineDelta(live, attempt, true);
    }
  }

  function liveText(live) {
    const attempts = [...live.attempts.keys()].filter((a) => !live.discarded.has(a)).sort((a, b) => a - b);
    return attempts.map((a) => live.attempts.get(a).join("")).join("");
  }

  function itemVisible(item) {
    if (item.settledAt != null && state.transcriptAsOf >= item.settledAt) return false;
    if (item.kind === "text") {
      const live = state.live.get(item.key);
      return Boolean(live) && !state.transcriptIds.messages.has(live.messageId) && liveText(live) !== "";
    }
    if (item.kind === "tool") return !state.transcriptIds.tools.has(item.key);
    return true; // an approval card stays until its turn settles
  }

  // ---------------------------------------------------------------- DOM helpers

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c == null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

  function fmtTime(at) {
    if (!at) return "";
    const d = new Date(at * 1000);
    const p = (n, w = 2) => String(n).padStart(w, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  }

  function compactJson(value) {
    if (value == null) return "";
    const s = typeof value === "string" ? value : JSON.stringify(value);
    return s.length > 140 ? s.slice(0, 137) + "…" : s;
  }

  // ---------------------------------------------------------------- rendering

  let renderQueued = false;
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    window.requestAnimationFrame(() => {
      renderQueued = false;
      render();
    });
  }

  function nearBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 120;
  }

  let transcriptShown = null;
  function render() {
    const scroller = $("messages");
    const stick = nearBottom(scroller) || document.scrollingElement.scrollHeight - window.scrollY - window.innerHeight < 120;
    if (transcriptShown !== state.transcript || retryTargetChanged()) {
      renderTranscript();
      transcriptShown = state.transcript;
    }
    renderLive();
    renderPending();
    renderControls();
    if (isRun) renderRun();
    $("empty").hidden = Boolean(
      state.transcript.length || state.pending.length || state.liveItems.length || isRun || state.loadError
    );
    if (stick) {
      scroller.scrollTop = scroller.scrollHeight;
      if (window.matchMedia("(max-width: 900px)").matches) window.scrollTo(0, document.body.scrollHeight);
    }
  }

  // The failure card that carries the Retry button depends on the turns' state as well as the transcript.
  let retryTarget = null;
  function retryTargetChanged() {
    const t = latestTurn();
    const target = t ? `${t.key}:${t.status}:${t.epoch}` : null;
    const changed = target !== retryTarget;
    retryTarget = target;
    return changed;
  }

  function renderTranscript() {
    const root = $("transcript");
    const results = new Map();
    for (const m of state.transcript) {
      for (const b of m.content || []) if (b.type === "tool_result") results.set(b.tool_use_id, b);
    }
    const latest = latestTurn();
    const retryable = latest && latest.status === "failed" ? latest : null;
    let lastError = -1;
    state.transcript.forEach((m, i) => {
      if (m.role === "notice" && (m.content || []).some((b) => b.kind === "error")) lastError = i;
    });
    const nodes = [];
    state.transcript.forEach((m, i) => {
      const blocks = m.content || [];
      if (m.role === "user") {
        const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join("");
        if (text) nodes.push(userBubble(text, false, i === 0 && isRun));
      } else if (m.role === "assistant") {
        const prev = state.transcript[i - 1];
        nodes.push(assistantBlock(blocks, results, false, Boolean(prev && prev.role === "assistant")));
      } else if (m.role === "notice") {
        for (const b of blocks) {
          if (b.kind === "error") {
            const withRetry = retryable && i === lastError && (!m.turn_id || m.turn_id === retryable.key);
            const turn = m.turn_id ? state.turns.get(m.turn_id) : withRetry ? retryable : null;
            // A failure whose turn was retried since keeps its place in the record, quietly.
            const resolved = Boolean(turn && turn.status !== "failed");
            nodes.push(failureCard(b.text, turn && (turn.failure || turn.lastFailure), withRetry, resolved));
          } else {
            nodes.push(noticeNote(b.kind, b.text));
          }
        }
      }
    });
    root.replaceChildren(...nodes);
  }

  function userBubble(text, pending, isGoal) {
    return h(
      "div",
      { class: `msg msg-user${pending ? " is-pending" : ""}`, "data-testid": "message", "data-role": "user" },
      h("div", { class: "msg-label", text: isGoal ? "Goal" : pending ? "You · sending" : "You" }),
      h("div", { class: "bubble", "data-testid": "user-text", text }),
    );
  }

  function assistantBlock(blocks, results, live, continued = false) {
    const body = [];
    for (const b of blocks) {
      if (b.type === "text" && b.text) {
        body.push(h("div", { class: "answer", "data-testid": "assistant-text", "data-live": live ? "true" : null, text: b.text }));
      } else if (b.type === "tool_use") {
        const r = results.get(b.id);
        const status = !r ? "no result" : r.synthesized ? "interrupted" : r.is_error ? "error" : "ok";
        body.push(toolChip(b.name, b.input, status, r ? r.content : null));
      }
    }
    return h(
      "div",
      { class: `msg msg-assistant${live ? " is-live" : ""}${continued ? " is-continued" : ""}`, "data-testid": "message", "data-role": "assistant" },
      continued ? null : h("div", { class: "msg-label", text: "Assistant" }),
      h("div", { class: "msg-body" }, body),
    );
  }

  function toolChip(name, input, status, result) {
    const tone = {
      ok: "ok", deduplicated: "ok", running: "busy", error: "error", interrupted: "warn", denied: "error",
      "awaiting approval": "attention",
    }[status] || "muted";
    return h(
      "details",
      { class: "tool", "data-testid": "tool-call", "data-status": status },
      h(
        "summary",
        {},
        h("span", { class: "tool-icon", "aria-hidden": "true", text: "⚙" }),
        h("span", { class: "tool-name", text: name }),
        h("code", { class: "tool-input", text: compactJson(input) }),
        h("span", { class: `pill pill-${tone}`, "data-testid": "tool-status", text: status }),
      ),
      h(
        "div",
        { class: "tool-detail" },
        h("div", { class: "tool-detail-label", text: "Input" }),
        h("pre", { text: JSON.stringify(input ?? {}, null, 2) }),
        result != null ? h("div", { class: "tool-detail-label", text: "Result" }) : null,
        result != null ? h("pre", { text: String(result) }) : null,
      ),
    );
  }

  // The note's text is exactly the contract's words; its icon is drawn by CSS (.note::before).
  function noticeNote(kind, text) {
    return h(
      "div",
      { class: `note note-${kind}`, "data-testid": "notice", "data-kind": kind, role: "note" },
      h("span", { class: "note-text", text }),
    );
  }

  function failureCard(text, failure, withRetry, resolved) {
    const parsed = /^Failed(?: \(([a-z_]+)\))?: ?([\s\S]*)$/.exec(text || "");
    const cls = (failure && failure.cls) || (parsed && parsed[1]) || "unknown";
    let message = (failure && failure.message) || (parsed ? parsed[2] : text);
    if (message.startsWith(`${cls}: `)) message = message.slice(cls.length + 2); // the chip says it already
    return h(
      "div",
      {
        class: `failure${resolved ? " is-resolved" : ""}`,
        "data-testid": "failure",
        "data-class": cls,
        "data-resolved": resolved ? "true" : null,
        role: resolved ? null : "alert",
      },
      h(
        "div",
        { class: "failure-head" },
        h("span", { class: "failure-title", text: resolved ? "An earlier attempt failed" : isRun ? "This run failed" : "This turn failed" }),
        h("code", { class: "pill pill-error", "data-testid": "failure-class", text: cls }),
      ),
      h("div", { class: "failure-message", text: message }),
      withRetry
        ? h("div", { class: "failure-actions" },
          h("button", { type: "button", class: "btn btn-primary btn-small", "data-testid": "retry-button", onclick: onRetry }, "Retry"),
          failure && failure.retryable === false
            ? h("span", { class: "failure-hint", text: "Retrying is unlikely to help with this class of failure." })
            : null)
        : null,
    );
  }

  function renderLive() {
    const root = $("live");
    const nodes = [];
    for (const item of state.liveItems) {
      if (!itemVisible(item)) continue;
      if (item.kind === "text") {
        const live = state.live.get(item.key);
        const block = assistantBlock([{ type: "text", text: liveText(live) }], new Map(), true);
        block.dataset.key = item.key;
        block.dataset.kind = "text";
        nodes.push(block);
      } else if (item.kind === "tool") {
        const t = state.tools.get(item.key);
        if (t) nodes.push(h("div", { class: "msg msg-assistant msg-tool" }, toolChip(t.name, t.input, t.status, null)));
      } else if (item.kind === "approval") {
        nodes.push(approvalCard(item.key, state.approvals.get(item.key)));
      }
    }
    // Rebuild only what changed, so a focused button or an open <details> is not lost on every delta.
    syncChildren(root, nodes);
  }

  // Bring `root`'s children in line with `nodes`. A growing answer keeps its element and only its text
  // changes (screen readers hear the addition, not the whole answer again); other nodes are replaced only
  // when they differ, so a focused button or an open <details> survives the next delta.
  function syncChildren(root, nodes) {
    for (let i = 0; i < nodes.length; i++) {
      const have = root.children[i];
      const want = nodes[i];
      if (!have) {
        root.append(want);
      } else if (have.dataset.key && have.dataset.key === want.dataset.key && want.dataset.kind === "text") {
        const text = want.querySelector(".answer").textContent;
        const answer = have.querySelector(".answer");
        if (answer.textContent !== text) answer.textContent = text;
      } else if (!have.isEqualNode(want)) {
        have.replaceWith(want);
      }
    }
    while (root.children.length > nodes.length) root.lastElementChild.remove();
  }

  function approvalCard(toolUseId, a) {
    if (!a) return h("div");
    const decided = a.decision != null;
    return h(
      "div",
      { class: `approval${decided ? " is-decided" : ""}`, "data-testid": "approval", "data-tool-use-id": toolUseId, "data-decision": a.decision },
      h("div", { class: "approval-head" },
        h("span", { class: "approval-title", text: decided ? "Tool call decided" : "Approval needed" }),
        h("span", { class: "tool-name", text: a.name })),
      h("pre", { class: "approval-input", text: JSON.stringify(a.input ?? {}, null, 2) }),
      decided
        ? h("div", { class: `pill pill-${a.decision === "approved" ? "ok" : "error"}`, text: a.decision === "approved" ? "Approved" : a.reason ? `Denied: ${a.reason}` : "Denied" })
        : h("div", { class: "approval-actions" },
          h("button", { type: "button", class: "btn btn-primary btn-small", "data-testid": "approve-button", onclick: () => decide(toolUseId, true) }, "Approve"),
          h("button", { type: "button", class: "btn btn-quiet btn-small", "data-testid": "deny-button", onclick: () => decide(toolUseId, false) }, "Deny")),
    );
  }

  function renderPending() {
    syncChildren($("pending"), state.pending.map((p) => userBubble(p.text, true, false)));
  }

  function workingLabel(turn) {
    if (turn.status === "queued") return "Queued…";
    if (turn.waiting === "approval") return "Waiting for your approval";
    if (turn.waiting === "platform_interrupt" && turn.status === "waiting") return "Waiting for a worker…";
    if (turn.lastType === "turn.retry" || (turn.lastType === "run.step" && turn.waiting)) return "The stream broke — replaying…";
    if (turn.waiting === "platform_interrupt") return "Moving to another worker…";
    return "Writing…";
  }

  let stopping = false;
  function renderControls() {
    const turn = isRun ? state.turns.get(ownerId) : latestTurn();
    const runActive = isRun && state.run && ACTIVE.has(state.run.status);
    const active = Boolean(turn && ACTIVE.has(turn.status)) || runActive;
    const stop = $("stop-button");
    stop.hidden = !active;
    if (!active) stopping = false;
    stop.disabled = stopping;
    stop.textContent = stopping ? "Stopping…" : "Stop";
    const working = $("working");
    working.hidden = !active;
    if (active) working.querySelector(".working-label").textContent = turn ? workingLabel(turn) : "Working…";
    if (isRun) {
      const runFailed = (state.run && state.run.status === "failed") || (turn && turn.status === "failed");
      let retry = $("controls").querySelector('[data-testid="retry-button"]');
      if (runFailed && !document.querySelector('.failure [data-testid="retry-button"]')) {
        if (!retry) $("controls").append(h("button", { type: "button", class: "btn btn-primary", "data-testid": "retry-button", onclick: onRetry }, "Retry"));
      } else if (retry && retry.parentElement === $("controls")) {
        retry.remove();
      }
    }
  }

  function renderRun() {
    $("run-card").hidden = false;
    const run = state.run;
    const goal = state.transcript.find((m) => m.role === "user");
    $("run-goal").textContent = goal ? (goal.content || []).map((b) => b.text || "").join("") : ownerId;
    const status = run ? run.status : state.loadError ? "unknown" : "loading";
    const chip = $("run-status");
    chip.textContent = status;
    chip.dataset.status = status;
    $("run-steps-count").textContent = run ? String(run.steps) : String(state.steps.length);
    $("run-interruptions").textContent = run ? String(run.interruptions) : "0";
    $("run-waiting").textContent = run && run.waiting_reason ? run.waiting_reason.replace("_", " ") : "—";
    const items = state.steps.map((s, i) => {
      let label;
      if (s.discarded) label = `model attempt ${s.attempt ?? ""} discarded`;
      else if (s.kind === "model") label = s.tools && s.tools.length ? `model → ${s.tools.join(", ")}` : "model answer";
      else if (s.kind === "tool") label = `${s.name}`;
      else label = s.kind || "step";
      const tone = s.discarded ? "warn" : s.status === "error" ? "error" : s.status === "interrupted" ? "warn" : "ok";
      return h(
        "li",
        { class: `step step-${tone}`, "data-testid": "run-step", "data-kind": s.kind || (s.discarded ? "discarded" : "") },
        h("span", { class: "step-n", text: String(i + 1) }),
        h("span", { class: "step-label", text: label }),
        s.class ? h("code", { class: "pill pill-warn", text: s.class }) : null,
        s.status ? h("span", { class: `pill pill-${tone}`, text: s.status }) : null,
        h("time", { class: "step-time", text: fmtTime(s.at) }),
      );
    });
    syncChildren($("run-steps"), items);
    if (state.loadError && !run) $("run-goal").textContent = state.loadError;
  }

  function setConnection(s) {
    const el = $("connection");
    el.dataset.state = s;
    el.querySelector(".connection-label").textContent = {
      connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", offline: "Offline — retrying",
    }[s];
  }

  // ---------------------------------------------------------------- the timeline

  const TYPE_LABELS = {
    "turn.queued": "Queued", "turn.started": "Started", "turn.retry": "Stream replayed",
    "turn.resumed": "Resumed from stored round", "turn.completed": "Completed", "turn.failed": "Failed",
    "turn.stopped": "Stopped", "tool.called": "Tool called", "tool.result": "Tool result",
    "tool.approval_requested": "Approval requested", "tool.approved": "Approved", "tool.denied": "Denied",
    "run.started": "Run started", "run.step": "Step", "run.interrupted": "Interrupted by a deploy",
    "run.resumed": "Run resumed", "run.completed": "Run completed", "run.failed": "Run failed",
    "run.stopped": "Run stopped", "text.delta": "Text streamed",
  };

  function labelOf(type, ev) {
    if (type === "turn.retry" || (type === "run.step" && ev.discarded)) {
      if (ev.max_attempts) return "Interrupted by a deploy";
      if (ev.auto_resume) return "Resuming from the stored round";
      return ev.had_output ? "Stream broke, partial text discarded" : "Attempt failed, retried";
    }
    if (type === "run.step") return ev.kind === "tool" ? "Tool step" : ev.kind === "model" ? "Model step" : "Step";
    if (type === "turn.queued" && ev.retry) return "Queued again (retry)";
    return TYPE_LABELS[type] || type;
  }

  function tone(type, ev) {
    if (type.endsWith(".failed") || type === "tool.denied") return "error";
    if (type.endsWith(".completed") || type === "tool.approved") return "ok";
    if (type.endsWith(".stopped")) return "stop";
    if (type === "turn.retry" || type === "run.interrupted" || type.endsWith(".resumed") || (type === "run.step" && ev.discarded)) return "warn";
    if (type === "tool.approval_requested") return "attention";
    if (type.startsWith("tool.")) return ev.is_error ? "error" : "tool";
    if (type === "text.delta") return "stream";
    return "neutral";
  }

  let timelineTurn = null;
  let timelineTotal = 0;
  const deltaRows = new Map(); // live key + attempt -> {row, chars, count}

  function timelineAppend(li, ev) {
    const list = $("timeline");
    const panel = list.closest(".timeline-panel");
    const stick = panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80;
    const key = ev.turn_id || ev.run_id || null;
    if (key && key !== timelineTurn && !isRun) {
      timelineTurn = key;
      list.append(h("li", { class: "tl-turn", "data-testid": "timeline-turn" }, h("span", { text: "Turn" }), h("code", { text: key })));
    }
    list.append(li);
    if (stick) panel.scrollTop = panel.scrollHeight;
  }

  function timelineAdd(type, ev) {
    timelineTotal += 1;
    $("timeline-count").textContent = `${timelineTotal} event${timelineTotal === 1 ? "" : "s"}`;
    const tags = [];
    if (ev.class) tags.push(h("code", { class: "tag tag-class", "data-testid": "timeline-class", text: ev.class }));
    if (ev.attempt != null) {
      tags.push(h("span", { class: "tag", "data-testid": "timeline-attempt", text: ev.max_attempts ? `attempt ${ev.attempt} of ${ev.max_attempts}` : `attempt ${ev.attempt}` }));
    }
    if (ev.discarded) tags.push(h("span", { class: "tag tag-discarded", "data-testid": "timeline-discarded", text: "discarded" }));
    if (ev.auto_resume) tags.push(h("span", { class: "tag", text: "auto-resume" }));
    if (ev.retryable != null && type.endsWith(".failed")) tags.push(h("span", { class: "tag", text: ev.retryable ? "retryable" : "not retryable" }));
    if (ev.name) tags.push(h("code", { class: "tag tag-tool", text: ev.name }));
    if (ev.status && type !== "run.step") tags.push(h("span", { class: "tag", text: ev.status }));
    if (type === "run.step" && ev.kind) tags.push(h("span", { class: "tag", text: ev.kind === "tool" ? `tool · ${ev.status || ""}` : ev.kind }));
    if (ev.resumed) tags.push(h("span", { class: "tag", text: "resumed" }));
    const details = [];
    if (ev.reason) details.push(ev.reason);
    if (ev.message && type.endsWith(".failed")) details.push(ev.message);
    if (ev.cause) details.push(`cause: ${ev.cause}`);
    if (ev.usage && TERMINAL.has(type)) {
      const u = ev.usage;
      details.push(`${u.attempts} attempt${u.attempts === 1 ? "" : "s"}${u.discarded_attempts ? `, ${u.discarded_attempts} discarded` : ""} · ${u.input_tokens} in / ${u.output_tokens} out tokens`);
    }
    if (type === "tool.called" && ev.input) details.push(compactJson(ev.input));
    const li = h(
      "li",
      { class: `tl-item tone-${tone(type, ev)}`, "data-testid": "timeline-event", "data-type": type, "data-id": ev.id },
      h("span", { class: "tl-dot", "aria-hidden": "true" }),
      h("div", { class: "tl-body" },
        h("div", { class: "tl-row" },
          h("span", { class: "tl-label", text: labelOf(type, ev) }),
          h("time", { class: "tl-time", datetime: ev.at ? new Date(ev.at * 1000).toISOString() : null, text: fmtTime(ev.at) })),
        h("code", { class: "tl-type", "data-testid": "timeline-type", text: type }),
        tags.length ? h("div", { class: "tl-tags" }, tags) : null,
        details.length ? h("div", { class: "tl-detail", text: details.join(" · ") }) : null),
    );
    timelineAppend(li, ev);
  }

  // Deltas are many: one timeline row per (message, attempt), counting what streamed.
  function timelineDelta(live, attempt, discarded = false) {
    const rowKey = `${live.key}#${attempt}`;
    let row = deltaRows.get(rowKey);
    const parts = live.attempts.get(attempt) || [];
    if (!row) {
      if (!parts.length) return;
      const el = h("li", { class: "tl-item tone-stream", "data-testid": "timeline-event", "data-type": "text.delta" });
      row = { el, at: live.firstAt };
      deltaRows.set(rowKey, row);
      timelineAppend(el, { turn_id: live.key.split("~")[0] });
    }
    const chars = parts.join("").length;
    const count = parts.filter((p) => p !== undefined).length;
    row.el.classList.toggle("is-discarded", discarded || live.discarded.has(attempt));
    row.el.replaceChildren(
      h("span", { class: "tl-dot", "aria-hidden": "true" }),
      h("div", { class: "tl-body" },
        h("div", { class: "tl-row" },
          h("span", { class: "tl-label", text: "Text streamed" }),
          h("time", { class: "tl-time", text: fmtTime(row.at) })),
        h("code", { class: "tl-type", "data-testid": "timeline-type", text: "text.delta" }),
        h("div", { class: "tl-tags" },
          h("span", { class: "tag", "data-testid": "timeline-attempt", text: `attempt ${attempt}` }),
          h("span", { class: "tag", text: `${count} delta${count === 1 ? "" : "s"} · ${chars} chars` }),
          live.discarded.has(attempt) ? h("span", { class: "tag tag-discarded", "data-testid": "timeline-discarded", text: "discarded" }) : null)),
    );
  }

  // ---------------------------------------------------------------- actions

  function showControlError(message) {
    $("control-error").textContent = message || "";
  }

  async function send(text) {
    const button = $("send-button");
    button.disabled = true;
    showControlError("");
    try {
      const ref = await api("POST", `${base}/messages`, { text });
      if (!state.transcriptIds.userTurns.has(ref.turn_id)) state.pending.push({ turnId: ref.turn_id, text });
      turnOf(ref.turn_id);
      $("composer-input").value = "";
      render();
    } catch (err) {
      showControlError(err.message);
    } finally {
      button.disabled = false;
      $("composer-input").focus();
    }
  }

  async function onStop() {
    stopping = true;
    renderControls();
    try {
      await api("POST", `${base}/stop`);
    } catch (err) {
      stopping = false;
      showControlError(err.message);
      renderControls();
    }
  }

  async function onRetry(event) {
    const button = event.currentTarget;
    button.disabled = true;
    button.textContent = "Retrying…";
    showControlError("");
    try {
      await api("POST", `${base}/retry`);
    } catch (err) {
      button.disabled = false;
      button.textContent = "Retry";
      showControlError(err.message);
    }
  }

  async function decide(toolUseId, approve) {
    showControlError("");
    try {
      await api("POST", `${base}/approvals/${encodeURIComponent(toolUseId)}`, { approve });
    } catch (err) {
      showControlError(err.message);
    }
  }

  // ---------------------------------------------------------------- start

  function start() {
    $("owner-kind").textContent = isRun ? "run" : "chat";
    $("owner-id").textContent = ownerId;
    $("timeline-owner").textContent = isRun ? "run" : "chat";
    document.title = `${isRun ? "Run" : "Chat"} ${ownerId} · Baton`;
    const composer = $("composer");
    if (isRun) composer.hidden = true;
    composer.addEventListener("submit", (e) => {
      e.preventDefault();
      const text = $("composer-input").value;
      if (text.trim()) send(text);
    });
    $("composer-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        composer.requestSubmit();
      }
    });
    $("stop-button").addEventListener("click", onStop);
    render();
    refreshTranscript();
    refreshRun();
    connect(null);
  }

  start();
})();
