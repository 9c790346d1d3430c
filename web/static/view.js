// The chat column: the transcript, the live answer, pending messages, the controls and a run's card.
// Every render is a function of the PageState (state.js); nothing here keeps its own copy of the text.

import { ACTIVE } from "./state.js";
import { byId, compactJson, fmtTime, h, syncChildren } from "./dom.js";

const TOOL_TONES = {
  ok: "ok", deduplicated: "ok", running: "busy", error: "error", interrupted: "warn", denied: "error",
  "awaiting approval": "attention",
};

export class ChatView {
  /** `actions`: {retry(event), decide(toolUseId, approve), isStopping(), reveal(turnKey)}. */
  constructor(state, { isRun, ownerId, actions }) {
    this.state = state;
    this.isRun = isRun;
    this.ownerId = ownerId;
    this.actions = actions;
    this.shownTranscript = null;
    this.shownTurns = null;
    this.queued = false;
  }

  /** Render on the next animation frame (many deltas in one frame cost one render). */
  schedule() {
    if (this.queued) return;
    this.queued = true;
    window.requestAnimationFrame(() => {
      this.queued = false;
      this.render();
    });
  }

  render() {
    const s = this.state;
    const scroller = byId("messages");
    const stacked = window.matchMedia("(max-width: 900px)").matches;
    const stick = stacked
      ? document.scrollingElement.scrollHeight - window.scrollY - window.innerHeight < 160
      : scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
    // The transcript's failure cards depend on the turns' status too (which one offers Retry).
    const turns = s.turnOrder.map((k) => `${k}:${s.turns.get(k).status}`).join(",");
    if (this.shownTranscript !== s.transcript || this.shownTurns !== turns) {
      this.renderTranscript();
      this.shownTranscript = s.transcript;
      this.shownTurns = turns;
    }
    this.renderLive();
    syncChildren(byId("pending"), s.pending.map((p) => userBubble(p.text, { pending: true })));
    this.renderControls();
    if (this.isRun) this.renderRun();
    byId("empty").hidden = Boolean(
      s.transcript.length || s.pending.length || s.liveItems.length || this.isRun || s.loadError,
    );
    if (stick) {
      if (stacked) window.scrollTo(0, document.body.scrollHeight);
      else scroller.scrollTop = scroller.scrollHeight;
    }
  }

  renderTranscript() {
    const s = this.state;
    const results = new Map();
    for (const m of s.transcript) {
      for (const b of m.content || []) if (b.type === "tool_result") results.set(b.tool_use_id, b);
    }
    const current = s.currentTurn();
    const failed = current && current.status === "failed" ? current : null;
    let lastError = -1;
    s.transcript.forEach((m, i) => {
      if (m.role === "notice" && (m.content || []).some((b) => b.kind === "error")) lastError = i;
    });
    // The last assistant message of each turn carries that turn's story (replays, resumes) in one line.
    const lastOfTurn = new Map();
    s.transcript.forEach((m, i) => {
      if (m.role === "assistant" && m.turn_id) lastOfTurn.set(m.turn_id, i);
    });
    const nodes = [];
    let shown = null; // the role of the last message shown (tool results are not shown on their own)
    s.transcript.forEach((m, i) => {
      const blocks = m.content || [];
      if (m.role === "user") {
        // A user message holding only tool results is the model's input, shown on the tool calls instead;
        // a run's first message is its goal, which the run card above shows.
        const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join("");
        if (text && !(this.isRun && i === 0)) {
          const files = blocks.filter((b) => b.type === "image" || b.type === "document");
          nodes.push(userBubble(text, { files, fileUrl: this.actions.fileUrl }));
          shown = "user";
        }
      } else if (m.role === "assistant") {
        const owner = m.turn_id ? s.turns.get(m.turn_id) : null;
        const who = answeredBy(owner && owner.agent, m.model || (owner && owner.model));
        const block = assistantBlock(blocks, results, { continued: shown === "assistant", who });
        shown = "assistant";
        const turn = lastOfTurn.get(m.turn_id) === i ? s.turns.get(m.turn_id) : null;
        const story = turn ? turnStory(turn) : "";
        if (story) {
          block.append(h("div", { class: "turn-meta", "data-testid": "turn-meta" },
            h("span", { text: story }),
            h("button", {
              type: "button", class: "link-button", onclick: () => this.actions.reveal(turn.key),
            }, "see the timeline")));
        }
        nodes.push(block);
      } else if (m.role === "notice") {
        shown = "notice";
        for (const b of blocks) {
          if (b.kind !== "error") {
            nodes.push(noticeNote(b.kind, b.text));
            continue;
          }
          const key = m.turn_id || (this.isRun ? this.ownerId : null);
          const withRetry = Boolean(failed) && i === lastError && (!key || key === failed.key);
          const turn = key ? s.turns.get(key) : withRetry ? failed : null;
          // A failure whose turn was retried since keeps its place in the record, quietly.
          const resolved = Boolean(turn && turn.status !== "failed");
          const failure = turn && (turn.failure || turn.lastFailure);
          nodes.push(this.failureCard(b.text, failure, { withRetry, resolved }));
        }
      }
    });
    byId("transcript").replaceChildren(...nodes);
  }

  failureCard(text, failure, { withRetry, resolved }) {
    const parsed = /^Failed(?: \(([a-z_]+)\))?: ?([\s\S]*)$/.exec(text || "");
    const cls = (failure && failure.cls) || (parsed && parsed[1]) || "unknown";
    let message = (failure && failure.message) || (parsed ? parsed[2] : text);
    if (message.startsWith(`${cls}: `)) message = message.slice(cls.length + 2); // the chip says it already
    const title = resolved ? "An earlier attempt failed" : this.isRun ? "This run failed" : "This turn failed";
    return h(
      "div",
      {
        class: `failure${resolved ? " is-resolved" : ""}`,
        "data-testid": "failure",
        "data-class": cls,
        "data-resolved": resolved ? "true" : null,
        role: resolved ? null : "alert",
      },
      h("div", { class: "failure-head" },
        h("span", { class: "failure-title", text: title }),
        h("code", { class: "pill pill-error", "data-testid": "failure-class", text: cls })),
      h("div", { class: "failure-message", text: message }),
      withRetry
        ? h("div", { class: "failure-actions" },
          h("button", {
            type: "button", class: "btn btn-primary btn-small", "data-testid": "retry-button",
            onclick: this.actions.retry,
          }, "Retry"),
          failure && failure.retryable === false
            ? h("span", { class: "failure-hint", text: "Retrying is unlikely to help with this class of failure." })
            : null)
        : null,
    );
  }

  renderLive() {
    const nodes = this.state.visibleLive().map((item) => {
      if (item.kind === "text") {
        const turn = this.state.turns.get(item.turnKey);
        const who = answeredBy(turn && turn.agent, turn && turn.model);
        const blocks = [{ type: "thinking", thinking: item.reasoning }, { type: "text", text: item.text }];
        const block = assistantBlock(blocks, new Map(), { live: true, who });
        block.dataset.key = item.key;
        block.dataset.kind = "text";
        return block;
      }
      if (item.kind === "tool") {
        return h("div", { class: "msg msg-assistant msg-tool" }, toolChip(item.tool.name, item.tool.input, item.tool.status));
      }
      return this.approvalCard(item.key, item.approval);
    });
    syncChildren(byId("live"), nodes);
  }

  approvalCard(toolUseId, a) {
    if (!a) return h("div");
    const decided = a.decision != null;
    const verdict = a.decision === "approved" ? "Approved" : a.reason ? `Denied: ${a.reason}` : "Denied";
    return h(
      "div",
      {
        class: `approval${decided ? " is-decided" : ""}`,
        "data-testid": "approval",
        "data-tool-use-id": toolUseId,
        "data-decision": a.decision,
      },
      h("div", { class: "approval-head" },
        h("span", { class: "approval-title", text: decided ? "Tool call decided" : "Approval needed" }),
        h("span", { class: "tool-name", text: a.name })),
      h("pre", { class: "approval-input", text: JSON.stringify(a.input ?? {}, null, 2) }),
      decided
        ? h("div", { class: `pill pill-${a.decision === "approved" ? "ok" : "error"}`, text: verdict })
        : h("div", { class: "approval-actions" },
          h("button", {
            type: "button", class: "btn btn-primary btn-small", "data-testid": "approve-button",
            onclick: () => this.actions.decide(toolUseId, true),
          }, "Approve"),
          h("button", {
            type: "button", class: "btn btn-quiet btn-small", "data-testid": "deny-button",
            onclick: () => this.actions.decide(toolUseId, false),
          }, "Deny")),
    );
  }

  renderControls() {
    const s = this.state;
    const turn = s.currentTurn();
    const runActive = this.isRun && s.run && ACTIVE.has(s.run.status);
    const active = Boolean(turn && ACTIVE.has(turn.status)) || Boolean(runActive);
    const stopping = active && this.actions.isStopping();
    const stop = byId("stop-button");
    stop.hidden = !active;
    stop.disabled = stopping;
    stop.textContent = stopping ? "Stopping…" : "Stop";
    byId("working").hidden = !active;
    if (active) byId("working").querySelector(".working-label").textContent = turn ? workingLabel(turn) : "Working…";
    // A message sent while a turn is under way interrupts it (as chat products do), and the button says so.
    const send = byId("send-button");
    const interrupts = !this.isRun && s.busy();
    send.textContent = interrupts ? "Interrupt and send" : "Send";
    send.title = interrupts ? "Stops the answer being written and sends this message instead" : "";
    send.dataset.onBusy = interrupts ? "interrupt" : "enqueue";
  }

  renderRun() {
    const s = this.state;
    const run = s.run;
    byId("run-card").hidden = false;
    const goal = s.transcript.find((m) => m.role === "user");
    byId("run-goal").textContent = run === null && s.loadError
      ? s.loadError
      : goal ? (goal.content || []).map((b) => b.text || "").join("") : this.ownerId;
    const status = run ? run.status : s.loadError ? "unknown" : "loading";
    const chip = byId("run-status");
    chip.textContent = status;
    chip.dataset.status = status;
    byId("run-steps-count").textContent = String(run ? run.steps : s.steps.filter((x) => !x.discarded).length);
    byId("run-interruptions").textContent = String(run ? run.interruptions : 0);
    byId("run-waiting").textContent = run && run.waiting_reason ? run.waiting_reason.replace("_", " ") : "—";
    syncChildren(byId("run-steps"), s.steps.map((step, i) => stepRow(step, i)));
  }
}

/** "Answered after 1 discarded attempt · moved to another worker by a deploy", or "" when nothing happened. */
function turnStory(turn) {
  const parts = [];
  const discarded = turn.usage ? turn.usage.discarded_attempts : 0;
  if (discarded) parts.push(`answered after ${discarded} discarded attempt${discarded === 1 ? "" : "s"}`);
  if (turn.interruptions) {
    const n = turn.interruptions;
    parts.push(`moved to another worker by ${n === 1 ? "a deploy" : `${n} deploys`}`);
  }
  if (turn.resumed) parts.push("resumed from the stored round");
  const story = parts.join(" · ");
  return story ? story[0].toUpperCase() + story.slice(1) : "";
}

function workingLabel(turn) {
  if (turn.status === "queued") return "Queued…";
  if (turn.waiting === "approval") return "Waiting for your approval";
  if (turn.waiting === "platform_interrupt" && turn.status === "waiting") return "Waiting for a worker…";
  if (turn.lastType === "turn.retry") return "The stream broke — replaying…";
  if (turn.waiting === "platform_interrupt") return "Moving to another worker…";
  return "Writing…";
}

function userBubble(text, { pending = false, files = [], fileUrl = null } = {}) {
  return h(
    "div",
    { class: `msg msg-user${pending ? " is-pending" : ""}`, "data-testid": "message", "data-role": "user" },
    h("div", { class: "msg-label", text: pending ? "You · sending" : "You" }),
    h("div", { class: "bubble", "data-testid": "user-text", text }),
    files.length && fileUrl ? h("div", { class: "msg-files" }, files.map((f) => fileNode(f, fileUrl(f.sha256)))) : null,
  );
}

/** A message's file, served by the chat's files route: an image inline, a PDF as a link. */
function fileNode(block, url) {
  const name = block.name || block.sha256.slice(0, 12);
  if (block.type === "image") {
    return h("a", { href: url, target: "_blank", rel: "noopener" },
      h("img", { src: url, alt: name, class: "msg-image", "data-testid": "message-image", loading: "lazy" }));
  }
  return h("a", { href: url, target: "_blank", rel: "noopener", class: "msg-file-link", "data-testid": "message-file",
    text: `PDF · ${name}` });
}

/** "agent · model" for an answer's label, from its turn's `turn.started` and the message's own model. */
function answeredBy(agent, model) {
  return [agent, model].filter(Boolean).join(" · ");
}

function assistantBlock(blocks, results, { live = false, continued = false, who = "" } = {}) {
  const body = [];
  for (const b of blocks) {
    if (b.type === "thinking" && b.thinking) {
      body.push(thinkingFold(b.thinking, live));
    } else if (b.type === "text" && b.text) {
      body.push(h("div", { class: "answer", "data-testid": "assistant-text", "data-live": live ? "true" : null, text: b.text }));
    } else if (b.type === "tool_use") {
      const r = results.get(b.id);
      const status = !r ? "no result" : r.synthesized ? "interrupted" : r.is_error ? "error" : "ok";
      body.push(toolChip(b.name, b.input, status, r ? resultText(r.content) : null));
    }
  }
  const cls = `msg msg-assistant${live ? " is-live" : ""}${continued ? " is-continued" : ""}`;
  return h(
    "div",
    { class: cls, "data-testid": "message", "data-role": "assistant" },
    continued ? null : h("div", { class: "msg-label" },
      h("span", { text: "Assistant" }),
      who ? h("span", { class: "msg-agent", "data-testid": "answered-by", text: ` · ${who}` }) : null),
    h("div", { class: "msg-body" }, body),
  );
}

/** What the model reasoned before it answered: folded (a `<details>` closed until opened), in the order produced. */
function thinkingFold(text, live) {
  return h(
    "details",
    { class: "thinking", "data-testid": "thinking", "data-live": live ? "true" : null },
    h("summary", { class: "thinking-summary", text: live ? "Thinking…" : "Thinking" }),
    h("div", { class: "thinking-text", "data-testid": "thinking-text", text }),
  );
}

/** A tool call on one line (name, input, result status); its input and result on demand. */
// A result's text; a result of text and images (a list of blocks) names each image where it stood.
function resultText(content) {
  if (!Array.isArray(content)) return content;
  return content.map((p) => (p.type === "image" ? `[image ${p.name || p.sha256.slice(0, 12)}]` : p.text || "")).join("\n");
}

function toolChip(name, input, status, result = null) {
  return h(
    "details",
    { class: "tool", "data-testid": "tool-call", "data-status": status },
    h("summary", {},
      h("span", { class: "tool-icon", "aria-hidden": "true", text: "⚙" }),
      h("span", { class: "tool-name", text: name }),
      h("code", { class: "tool-input", text: compactJson(input) }),
      h("span", { class: `pill pill-${TOOL_TONES[status] || "muted"}`, "data-testid": "tool-status", text: status })),
    h("div", { class: "tool-detail" },
      h("div", { class: "tool-detail-label", text: "Input" }),
      h("pre", { text: JSON.stringify(input ?? {}, null, 2) }),
      result != null ? h("div", { class: "tool-detail-label", text: "Result" }) : null,
      result != null ? h("pre", { text: String(result) }) : null),
  );
}

// The note's text is exactly the contract's words; its marker is drawn by CSS (.note::before).
function noticeNote(kind, text) {
  return h(
    "div",
    { class: `note note-${kind}`, "data-testid": "notice", "data-kind": kind, role: "note" },
    h("span", { class: "note-text", text }),
  );
}

function stepRow(step, i) {
  let label;
  if (step.discarded) label = `model attempt ${step.attempt ?? ""} discarded`.replace("  ", " ");
  else if (step.kind === "model") label = step.tools && step.tools.length ? `model → ${step.tools.join(", ")}` : "model answer";
  else if (step.kind === "tool") label = step.name;
  else label = step.kind || "step";
  const tone = step.discarded || step.status === "interrupted" ? "warn" : step.status === "error" ? "error" : "ok";
  return h(
    "li",
    { class: `step step-${tone}`, "data-testid": "run-step", "data-kind": step.discarded ? "discarded" : step.kind || "" },
    h("span", { class: "step-n", text: String(i + 1) }),
    h("span", { class: "step-label", text: label }),
    step.class ? h("code", { class: "pill pill-warn", text: step.class }) : null,
    step.status ? h("span", { class: `pill pill-${tone}`, text: step.status }) : null,
    h("time", { class: "step-time", text: fmtTime(step.at) }),
  );
}
