// The timeline beside the chat: every event of the chat or run, in stream order, with its failure class,
// attempt and whether it discarded anything. Text deltas are many, so each streamed attempt is one row
// that counts its deltas (struck through once discarded).

import { TERMINAL } from "./state.js";
import { byId, compactJson, fmtTime, h } from "./dom.js";

const LABELS = {
  "turn.queued": "Queued", "turn.started": "Started", "turn.resumed": "Resumed from the stored round",
  "turn.completed": "Completed", "turn.failed": "Failed", "turn.stopped": "Stopped",
  "tool.called": "Tool called", "tool.result": "Tool result", "tool.approval_requested": "Approval requested",
  "tool.approved": "Approved", "tool.denied": "Denied", "run.started": "Run started",
  "run.interrupted": "Interrupted by a deploy", "run.resumed": "Run resumed", "run.completed": "Run completed",
  "run.failed": "Run failed", "run.stopped": "Run stopped", "agent.changed": "Agent updated",
};

/** What happened, in words (the type itself is shown beneath). */
export function labelOf(type, ev) {
  // A write tool waiting for the store's replica to confirm its write-ahead entry: nothing was discarded.
  if (ev.replication_wait) return "Waiting for the store's replica";
  if (type === "turn.retry" || (type === "run.step" && ev.discarded)) {
    if (ev.max_interruptions || ev.max_attempts) return "Interrupted by a deploy";
    if (ev.cause === "worker_lost" || ev.reason === "worker lost") return "Worker lost, its text discarded";
    if (ev.auto_resume) return "Resuming from the stored round";
    if (ev.had_output) return "Stream broke, partial text discarded";
    return ev.had_output === false ? "Attempt failed, retried" : "Attempt discarded";
  }
  if (type === "run.step") return ev.kind === "tool" ? "Tool step" : ev.kind === "model" ? "Model step" : "Step";
  if (type === "turn.queued" && ev.retry) return "Queued again (retry)";
  if (type === "turn.stopped" && ev.reason === "interrupt") return "Interrupted by a new message";
  return LABELS[type] || type;
}

function toneOf(type, ev) {
  if (type.endsWith(".failed") || type === "tool.denied") return "error";
  if (type.endsWith(".completed") || type === "tool.approved") return "ok";
  if (type.endsWith(".stopped")) return "stop";
  if (type === "turn.retry" || type === "run.interrupted" || type.endsWith(".resumed")) return "warn";
  if (type === "run.step" && (ev.discarded || ev.replication_wait)) return "warn";
  if (type === "tool.approval_requested") return "attention";
  if (type.startsWith("tool.")) return ev.is_error ? "error" : "tool";
  return "neutral";
}

function tagsOf(type, ev) {
  const tags = [];
  const tag = (text, cls = "", testid = null) => tags.push(h("span", { class: `tag ${cls}`, "data-testid": testid, text }));
  if (ev.class) tag(ev.class, "tag-class", "timeline-class");
  if (ev.interruption != null) {
    tag(`interruption ${ev.interruption}${ev.max_interruptions ? ` of ${ev.max_interruptions}` : ""}`, "", "timeline-interruption");
  }
  if (ev.attempt != null) {
    const cut = TERMINAL.has(type) ? "cut " : ""; // a stop's or failure's attempt that was streaming
    tag(ev.max_attempts ? `attempt ${ev.attempt} of ${ev.max_attempts}` : `${cut}attempt ${ev.attempt}`, "", "timeline-attempt");
  }
  if (ev.discarded) tag("discarded", "tag-discarded", "timeline-discarded");
  if (ev.retryable != null && type.endsWith(".failed")) tag(ev.retryable ? "retryable" : "not retryable");
  if (ev.name) tag(ev.name, "tag-tool");
  if (ev.server) tag(`MCP server ${ev.server}`, "tag-server", "timeline-server"); // the tool came from an MCP server
  if (ev.status) tag(ev.status);
  if (ev.resumed) tag("resumed");
  return tags;
}

function detailOf(type, ev) {
  const parts = [];
  if (ev.reason) parts.push(ev.reason);
  if (ev.message && type.endsWith(".failed")) {
    parts.push(ev.class && ev.message.startsWith(`${ev.class}: `) ? ev.message.slice(ev.class.length + 2) : ev.message);
  }
  if (ev.cause) parts.push(`cause: ${ev.cause}`);
  if (ev.usage && ev.usage.attempts && TERMINAL.has(type)) {
    const u = ev.usage;
    const discarded = u.discarded_attempts ? `, ${u.discarded_attempts} discarded` : "";
    const tokens = u.input_tokens || u.output_tokens ? ` · ${u.input_tokens} in / ${u.output_tokens} out tokens` : "";
    const cost = typeof u.cost_usd === "number" ? ` · $${u.cost_usd.toFixed(4)}` : "";
    parts.push(`${u.attempts} attempt${u.attempts === 1 ? "" : "s"}${discarded}${tokens}${cost}`);
  }
  if (type === "tool.called" && ev.input) parts.push(compactJson(ev.input));
  if ((type === "tool.approved" || type === "tool.denied") && ev.by) parts.push(`by ${ev.by}`);
  return parts.join(" · ");
}

function item(tone, type, label, at, tags, detail, id = null) {
  return h(
    "li",
    { class: `tl-item tone-${tone}`, "data-testid": "timeline-event", "data-type": type, "data-id": id },
    h("span", { class: "tl-dot", "aria-hidden": "true" }),
    h("div", { class: "tl-body" },
      h("div", { class: "tl-row" },
        h("span", { class: "tl-label", text: label }),
        h("time", { class: "tl-time", datetime: at ? new Date(at * 1000).toISOString() : null, text: fmtTime(at) })),
      h("code", { class: "tl-type", "data-testid": "timeline-type", text: type }),
      tags.length ? h("div", { class: "tl-tags" }, tags) : null,
      detail ? h("div", { class: "tl-detail", text: detail }) : null),
  );
}

export class Timeline {
  constructor({ isRun }) {
    this.isRun = isRun;
    this.turn = null;
    this.events = 0;
    this.rows = new Map(); // attempt id -> its row
  }

  /** One event of the Events section, appended in stream order. */
  event(type, ev) {
    this.events += 1;
    this.append(item(toneOf(type, ev), type, labelOf(type, ev), ev.at, tagsOf(type, ev), detailOf(type, ev), ev.id), ev.turn_id);
  }

  /** A streamed attempt's row, placed where its first delta came; `refresh()` keeps its counts. */
  attempt(rec) {
    const row = h("li", {});
    this.rows.set(rec.id, row);
    this.append(row, this.isRun ? null : rec.turnKey);
    rec.changed = true;
  }

  /** Scroll the timeline to a turn's heading and mark it for a moment (from "see the timeline"). */
  reveal(turnKey) {
    const el = [...document.querySelectorAll(".tl-turn[data-turn]")].find((x) => x.dataset.turn === turnKey);
    if (!el) return;
    el.scrollIntoView({ block: "start", behavior: "smooth" });
    el.classList.remove("is-revealed");
    void el.offsetWidth; // restart the highlight animation
    el.classList.add("is-revealed");
  }

  /** Name each turn heading by the words that started it, once the transcript has them. */
  nameTurns(transcript) {
    for (const el of document.querySelectorAll(".tl-turn[data-turn]")) {
      const slot = el.querySelector(".tl-turn-text");
      if (slot.textContent) continue;
      const m = transcript.find((x) => x.role === "user" && x.turn_id === el.dataset.turn);
      const text = m ? (m.content || []).filter((b) => b.type === "text").map((b) => b.text).join("") : "";
      if (text) slot.textContent = text.length > 60 ? `${text.slice(0, 57)}…` : text;
    }
  }

  refresh(attempts) {
    for (const rec of attempts) {
      if (!rec.changed) continue;
      rec.changed = false;
      const row = this.rows.get(rec.id);
      if (!row) continue;
      const count = rec.parts.filter((p) => p !== undefined).length;
      const chars = rec.parts.join("").length;
      const thought = (rec.thinking || []).join("").length;
      const tags = [
        h("span", { class: "tag", "data-testid": "timeline-attempt", text: `attempt ${rec.attempt}` }),
        h("span", { class: "tag", text: `${count} delta${count === 1 ? "" : "s"} · ${chars} chars` }),
        thought ? h("span", { class: "tag", "data-testid": "timeline-reasoning", text: `${thought} chars of reasoning` }) : null,
        rec.discarded ? h("span", { class: "tag tag-discarded", "data-testid": "timeline-discarded", text: "discarded" }) : null,
      ].filter(Boolean);
      const next = item("stream", "text.delta", "Text streamed", rec.at, tags, "");
      if (rec.discarded) next.classList.add("is-discarded");
      row.replaceWith(next);
      this.rows.set(rec.id, next);
    }
    const streamed = attempts.length;
    byId("timeline-count").textContent =
      `${this.events} event${this.events === 1 ? "" : "s"}` +
      (streamed ? ` · ${streamed} streamed attempt${streamed === 1 ? "" : "s"}` : "");
  }

  append(li, turnKey) {
    const list = byId("timeline");
    const panel = list.closest(".timeline-panel");
    const stacked = window.matchMedia("(max-width: 900px)").matches;
    const stick = stacked || panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80;
    if (turnKey && turnKey !== this.turn && !this.isRun) {
      // A heading per chat turn, so a long conversation's timeline reads turn by turn.
      this.turn = turnKey;
      list.append(h("li", { class: "tl-turn", "data-testid": "timeline-turn", "data-turn": turnKey },
        h("span", { class: "tl-turn-label", text: "Turn" }),
        h("span", { class: "tl-turn-text" }),
        h("code", { class: "tl-turn-id", text: turnKey })));
    }
    list.append(li);
    if (stick && !stacked) panel.scrollTop = panel.scrollHeight;
  }
}
