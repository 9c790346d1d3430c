// What the page knows about one chat or run, built from the transcript and the event stream. No DOM here.
//
// How the page stays correct across replays, reconnects and reloads (the one thing it must not get wrong):
//
//   What is shown is recomputed from two sources that never overlap for the same message:
//     1. the transcript (GET .../transcript), the durable record, and
//     2. live state built from the event stream, read from its BEGINNING on every page load (no `after`
//        id), every event and text delta in order.
//   Live text is kept per message and attempt, each delta in the slot of its own `index`, so a delta
//   applied twice lands in the same place. A `turn.retry` / `run.step` with `discarded: true` throws away
//   the attempt it names: the contract puts every delta of a discarded attempt before that event, so
//   whatever arrives after it belongs to the replay (see discard()). A live message is hidden as soon
//   as the transcript holds its message_id, or once a transcript fetched after its turn settled is shown;
//   from then on only the transcript's copy is shown. Nothing is ever appended to what is on screen: a
//   reload starts from empty state and replays the same stream, so it cannot double text; the browser's
//   own EventSource reconnect (Last-Event-ID) adds only what came after, and ids already applied are
//   skipped anyway.

// Event types the stream sends (SSE `event:` is the type, so each needs its own listener).
export const EVENT_TYPES = [
  "turn.queued", "turn.started", "turn.retry", "turn.resumed", "turn.completed", "turn.failed",
  "turn.stopped", "tool.called", "tool.result", "tool.approval_requested", "tool.approved",
  "tool.denied", "run.started", "run.step", "run.interrupted", "run.resumed", "run.completed",
  "run.failed", "run.stopped",
];
export const DELTA = "text.delta";
// The model's reasoning as it streams: numbered and discarded with its attempt exactly as text is.
export const REASONING = "reasoning.delta";
export const DELTAS = new Set([DELTA, REASONING]);
export const TERMINAL = new Set([
  "turn.completed", "turn.failed", "turn.stopped", "run.completed", "run.failed", "run.stopped",
]);
export const ACTIVE = new Set(["queued", "running", "waiting"]);

// Events written in the same batch as transcript messages: the transcript is worth reading again.
const CHANGES_TRANSCRIPT = new Set([
  ...TERMINAL, "turn.started", "turn.retry", "turn.resumed", "run.started", "run.step",
  "run.interrupted", "run.resumed", "tool.approval_requested",
]);

export class PageState {
  /** `runId`: the run this page shows (its events carry no turn_id), or null for a chat. */
  constructor(runId = null) {
    this.runId = runId;
    this.transcript = [];
    this.transcriptAsOf = -1; // value of `applied` when the transcript shown was requested
    this.transcriptIds = { messages: new Set(), tools: new Set(), userTurns: new Set() };
    this.applied = 0; // events applied so far: a local clock ordering events against transcript fetches
    this.seen = new Set(); // stream ids already applied
    this.lastId = null;
    this.turns = new Map(); // turn key (turn_id, or the run id) -> turn
    this.turnOrder = [];
    this.live = new Map(); // live key -> {key, messageId, turnKey, current: Map(attempt -> Attempt)}
    this.liveItems = []; // the live area, in order: {kind: "text"|"tool"|"approval", key, turnKey, settledAt}
    this.attempts = []; // every streamed attempt, in order (the timeline's "text streamed" rows)
    this.tools = new Map(); // tool_use_id -> {name, input, status}
    this.approvals = new Map(); // tool_use_id -> {name, input, decision, reason}
    this.pending = []; // messages posted but not yet in the transcript: {turnId, text}
    this.steps = []; // run.step events
    this.run = null; // GET /api/runs/{id}
    this.loadError = null;
  }

  turnOf(key) {
    let turn = this.turns.get(key);
    if (!turn) {
      turn = { key, status: "queued", epoch: 0, failure: null, lastFailure: null, lastType: null, waiting: null };
      this.turns.set(key, turn);
      this.turnOrder.push(key);
    }
    return turn;
  }

  latestTurn() {
    const key = this.turnOrder[this.turnOrder.length - 1];
    return key ? this.turns.get(key) : null;
  }

  /** The turn the page's controls act on: the run, or the chat's latest turn. */
  currentTurn() {
    return this.runId ? this.turns.get(this.runId) || null : this.latestTurn();
  }

  /** True while the current turn is queued, running or waiting: a message sent now interrupts it. */
  busy() {
    const turn = this.currentTurn();
    return Boolean(turn && ACTIVE.has(turn.status));
  }

  setTranscript(messages, asOf) {
    this.transcript = messages;
    this.transcriptAsOf = asOf;
    const ids = { messages: new Set(), tools: new Set(), userTurns: new Set() };
    for (const m of messages) {
      if (m.message_id) ids.messages.add(m.message_id);
      if (m.role === "user" && m.turn_id) ids.userTurns.add(m.turn_id);
      for (const b of m.content || []) if (b.type === "tool_use") ids.tools.add(b.id);
    }
    this.transcriptIds = ids;
    this.pending = this.pending.filter((p) => !ids.userTurns.has(p.turnId));
  }

  addPending(turnId, text) {
    this.turnOf(turnId);
    if (!this.transcriptIds.userTurns.has(turnId) && !this.pending.some((p) => p.turnId === turnId)) {
      this.pending.push({ turnId, text });
    }
  }

  /**
   * Apply one stream message. Returns null when its id was applied already, else what changed:
   * `{transcript, run}` (worth fetching again) and `attempt` (a newly streamed attempt, or null).
   */
  receive(type, ev) {
    if (ev.id) {
      if (this.seen.has(ev.id)) return null;
      this.seen.add(ev.id);
      this.lastId = ev.id;
    }
    this.applied += 1;
    const key = ev.turn_id || ev.run_id || this.runId;
    if (DELTAS.has(type)) {
      const attempt = key ? this.applyDelta(this.turnOf(key), ev, type === REASONING) : null;
      return { transcript: false, run: false, attempt };
    }
    const turn = key ? this.turnOf(key) : null;
    if (turn) this.applyEvent(turn, type, ev);
    return { transcript: CHANGES_TRANSCRIPT.has(type), run: Boolean(this.runId) && type.startsWith("run."), attempt: null };
  }

  applyEvent(turn, type, ev) {
    turn.lastType = type;
    switch (type) {
      case "turn.queued":
        turn.status = "queued";
        turn.failure = null;
        break;
      case "turn.started":
      case "run.started":
      case "run.resumed":
        // A new generation, or the same one on another worker: its live text is kept apart from what
        // earlier executions streamed (liveKey); discards still find those by message id (discard()).
        turn.epoch += 1;
        turn.status = "running";
        turn.waiting = null;
        turn.failure = null;
        // What answers it (an agent and its model): the page labels the turn's answer with them.
        if (ev.agent) Object.assign(turn, { agent: ev.agent, agentVersion: ev.agent_version, model: ev.model });
        break;
      case "turn.resumed":
        turn.status = "running";
        break;
      case "turn.retry":
        this.discard(turn, ev);
        if (ev.max_interruptions || ev.max_attempts) {
          turn.waiting = "platform_interrupt";
          turn.interruptions = Number(ev.interruption ?? ev.attempt) || (turn.interruptions || 0) + 1;
        }
        break;
      case "run.step":
        this.steps.push(ev);
        this.discard(turn, ev);
        break;
      case "run.interrupted":
        turn.status = "waiting";
        turn.waiting = "platform_interrupt";
        turn.interruptions = Number(ev.attempt) || (turn.interruptions || 0) + 1;
        break;
      case "tool.called":
        // The model step that asked for this tool is recorded: its text is final.
        for (const live of this.live.values()) if (live.turnKey === turn.key) live.finished = true;
        this.tools.set(ev.tool_use_id, { name: ev.name, input: ev.input, status: "running" });
        this.addLiveItem("tool", ev.tool_use_id, turn);
        break;
      case "tool.result": {
        const tool = this.tools.get(ev.tool_use_id) || { name: ev.name, input: null };
        tool.status = ev.status || (ev.is_error ? "error" : "ok");
        this.tools.set(ev.tool_use_id, tool);
        break;
      }
      case "tool.approval_requested": {
        this.approvals.set(ev.tool_use_id, { name: ev.name, input: ev.input, decision: null, reason: null });
        const tool = this.tools.get(ev.tool_use_id);
        if (tool) tool.status = "awaiting approval";
        this.addLiveItem("approval", ev.tool_use_id, turn);
        turn.status = "waiting";
        turn.waiting = "approval";
        break;
      }
      case "tool.approved":
      case "tool.denied": {
        const approved = type === "tool.approved";
        const a = this.approvals.get(ev.tool_use_id);
        if (a) {
          a.decision = approved ? "approved" : "denied";
          a.reason = ev.reason || null;
        }
        const tool = this.tools.get(ev.tool_use_id);
        if (tool && tool.status === "awaiting approval") tool.status = approved ? "running" : "denied";
        if (turn.waiting === "approval") {
          turn.status = "running";
          turn.waiting = null;
        }
        break;
      }
      default:
        if (TERMINAL.has(type)) this.settle(turn, type, ev);
    }
  }

  settle(turn, type, ev) {
    // A stop or a failure names the attempt it cut while streaming: that text is void.
    if (ev.message_id && ev.attempt != null) this.discard(turn, { ...ev, discarded: true });
    turn.status = type.split(".")[1];
    turn.waiting = null;
    turn.usage = ev.usage || null;
    turn.resumed = Boolean(ev.resumed);
    turn.failure = turn.status === "failed" ? { cls: ev.class, message: ev.message, retryable: ev.retryable } : null;
    if (turn.failure) turn.lastFailure = turn.failure;
    // What this generation streamed is now in the transcript (or, for a failure, deliberately not there):
    // hide it once a transcript fetched after this moment is shown.
    for (const item of this.liveItems) {
      if (item.turnKey === turn.key && item.settledAt == null) item.settledAt = this.applied;
    }
    for (const live of this.live.values()) if (live.turnKey === turn.key) live.settled = true;
    turn.epoch += 1;
  }

  addLiveItem(kind, key, turn) {
    if (key) this.liveItems.push({ kind, key, turnKey: turn.key, settledAt: null });
  }

  liveKey(turn, messageId) {
    return `${turn.key}~${turn.epoch}~${messageId}`;
  }

  /** A piece of an attempt's text, or of its reasoning (`reasoning`), in the slot of its own index. */
  applyDelta(turn, ev, reasoning = false) {
    if (turn.status === "queued") turn.status = "running";
    turn.lastType = DELTA;
    const key = this.liveKey(turn, ev.message_id);
    let live = this.live.get(key);
    if (!live) {
      live = { key, messageId: ev.message_id, turnKey: turn.key, current: new Map(), finished: false, settled: false };
      this.live.set(key, live);
      this.addLiveItem("text", key, turn);
    }
    const n = Number(ev.attempt) || 0;
    let attempt = live.current.get(n);
    const isNew = !attempt;
    if (isNew) {
      const id = `${key}#${this.attempts.length}`;
      attempt = { id, turnKey: turn.key, attempt: n, parts: [], thinking: [], discarded: false, at: ev.at, changed: true };
      live.current.set(n, attempt);
      this.attempts.push(attempt);
    }
    (reasoning ? attempt.thinking : attempt.parts)[Number(ev.index) || 0] = ev.text || "";
    attempt.changed = true;
    return isNew ? attempt : null;
  }

  // A discard names its message and attempt, and every delta of that attempt precedes it, so that attempt's
  // text goes; deltas after it start afresh (they are the replay's). When the attempt named is not one this
  // page saw stream (a deploy's event counts interruptions, not attempts), all the message streamed so far
  // goes: per the contract none of it can be kept. A discard naming a message the page never saw (the
  // sweeper reports a lost worker under a message id of its own) discards the turn's unfinished live
  // message, if any; a message whose step asked for tools is finished and stays.
  discard(turn, ev) {
    if (!ev.discarded) return;
    // A step keeps its message id across executions (a drain, a lost worker), so look in every epoch.
    let live = null;
    for (const candidate of this.live.values()) {
      if (candidate.turnKey !== turn.key || candidate.settled) continue;
      if (ev.message_id ? candidate.messageId === ev.message_id : !candidate.finished) live = candidate;
    }
    if (!live && ev.message_id) {
      for (const candidate of this.live.values()) {
        if (candidate.turnKey === turn.key && !candidate.settled && !candidate.finished) live = candidate;
      }
    }
    if (!live) return;
    const named = ev.attempt != null ? Number(ev.attempt) : null;
    const gone = named !== null && live.current.has(named) ? [named] : [...live.current.keys()];
    for (const n of gone) {
      const attempt = live.current.get(n);
      attempt.discarded = true;
      attempt.changed = true;
      live.current.delete(n);
    }
  }

  liveText(live, field = "parts") {
    return [...live.current.values()]
      .sort((a, b) => a.attempt - b.attempt)
      .map((a) => a[field].join(""))
      .join("");
  }

  /** The live items to show now, each with what it shows. */
  visibleLive() {
    const out = [];
    for (const item of this.liveItems) {
      if (item.settledAt != null && this.transcriptAsOf >= item.settledAt) continue;
      if (item.kind === "text") {
        const live = this.live.get(item.key);
        const shown = live && !this.transcriptIds.messages.has(live.messageId);
        const text = shown ? this.liveText(live) : "";
        const reasoning = shown ? this.liveText(live, "thinking") : "";
        if (text || reasoning) out.push({ ...item, text, reasoning });
      } else if (item.kind === "tool") {
        const tool = this.tools.get(item.key);
        if (tool && !this.transcriptIds.tools.has(item.key)) out.push({ ...item, tool });
      } else if (item.kind === "approval") {
        out.push({ ...item, approval: this.approvals.get(item.key) }); // stays until its turn settles
      }
    }
    return out;
  }
}
