"""One chat turn's stream as the AI SDK's UI message chunks (`ai` 7.x, what `useChat` reads): a pure fold.

The input is what Baton's own SSE stream carries for the turn, in stream order (events and `text.delta`, as
dicts with `type`); the output is `ui-message-chunks.ts`'s chunks. The whole turn is one UI message (id: the
turn's first model step, `first_message_id`), each model step a `start-step` ... `finish-step`:

- live text: `text-start` / `text-delta` / `text-end`, one text part per (step, attempt); live reasoning
  (`reasoning.delta`): `reasoning-start` / `reasoning-delta` / `reasoning-end` the same way, one part open at a time
  (the model's reasoning comes before its text: a text delta closes the reasoning part, and back);
- a tool call: `tool-input-available`; its result: `tool-output-available`, or `tool-output-error` when
  `is_error` (the result's text comes in the item's `content`, which the stream's reader adds: events do not
  carry tool output); a call that waits for a person: `tool-approval-request` (approval id = the call's id),
  and the decision `tool-approval-response`;
- a discarded attempt (`turn.retry` with `discarded: true`) or the attempt a stop or failure cut: `reset-step`,
  which makes the client drop the step's parts, exactly the text and reasoning Baton voids (its fencing puts every
  delta of a discarded attempt before the event that discards it); the replayed attempt's text follows in the step;
- a notice of the transcript (`notice`, an item only the history, web/ui_messages.py, feeds in): a text part;
- the end: `finish` with `stop` (completed), `interrupted` (stopped, after the notice as a text part),
  `error` (after an `error` chunk naming the failure class), or `tool-calls` when the turn parks for an
  approval (`parked`; a park writes no event, so the reader says when).

Items of other turns are ignored. Nothing here does I/O: web/routes_uichat.py reads and sends.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agent.messages import INTERRUPTED_RESULT, stop_notice

Chunk = dict[str, Any]
Attempt = tuple[str, int]  # (message_id, attempt)

NOTICE_PART = "notice"  # the text part id of a stop's notice


def first_message_id(turn_id: str) -> str:
    """The UI message's id: the turn's first model step's `message_id` (`agent.loop.model_step.step_message_id` of a
    fresh turn: generation 0, no rounds yet), known before any step streams, so `start` can carry it at once
    and every stream of the turn (the answer, a resume, an approval's continuation) names the same message."""
    return f"{turn_id}:m0"


@dataclass(frozen=True)
class TurnChunks:
    """The fold's state: what the client has been told so far about one turn."""

    turn_id: str
    step_open: bool = False
    step_message_id: str | None = None
    step_has_parts: bool = False  # an emptied step (all its text reset) is reused rather than closed
    after_results: bool = False  # results came in: the model's next output is a new step
    text: Attempt | None = None  # the open text part's attempt
    reasoning: Attempt | None = None  # the open reasoning part's attempt
    streamed: frozenset[Attempt] = frozenset()  # attempts with text or reasoning in the open step
    discarded: frozenset[Attempt] = frozenset()
    calls: tuple[str, ...] = ()  # tool calls the client was told of, in order
    step_calls: frozenset[str] = frozenset()  # those of the open step (a reset-step drops them too)
    answered: frozenset[str] = frozenset()
    asked: frozenset[str] = frozenset()  # calls whose approval was requested
    done: bool = False


def opening(state: TurnChunks) -> Chunk:
    """The `start` chunk every stream of the turn begins with."""
    return {"type": "start", "messageId": first_message_id(state.turn_id)}


def text_part_id(key: Attempt) -> str:
    return f"{key[0]}/a{key[1]}"


def reasoning_part_id(key: Attempt) -> str:
    """The step's reasoning part: unlike a text part, the SDK keeps this id in the message, so it names the step only
    (the history, which knows no attempts, assembles the same part; a discarded attempt's part is gone by then)."""
    return f"{key[0]}/reasoning"


def advance(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    """The chunks one stream item adds, and the state after it."""
    if state.done or item.get("turn_id") != state.turn_id:
        return state, []
    kind = item.get("type")
    if kind == "text.delta":
        return _delta(state, item, reasoning=False)
    if kind == "reasoning.delta":
        return _delta(state, item, reasoning=True)
    if kind == "tool.called":
        return _called(state, item)
    if kind == "tool.approval_requested":
        ident = str(item.get("tool_use_id"))
        if ident not in state.calls:
            return state, []
        chunk = {"type": "tool-approval-request", "approvalId": ident, "toolCallId": ident}
        return replace(state, asked=state.asked | {ident}), [chunk]
    if kind in ("tool.approved", "tool.denied"):
        return _decided(state, item, approved=kind == "tool.approved")
    if kind == "tool.result":
        return _result(state, item)
    if kind == "turn.retry":
        if not item.get("discarded"):
            return state, []
        return _void(state, item)
    if kind == "notice":
        return _notice(state, item)
    if kind == "turn.completed":
        state, out = _close_step(state)
        return replace(state, done=True), [*out, {"type": "finish", "finishReason": "stop"}]
    if kind == "turn.stopped":
        return _stopped(state, item)
    if kind == "turn.failed":
        return _failed(state, item)
    return state, []  # turn.queued, turn.started, turn.resumed: nothing the message shows


def parked(state: TurnChunks) -> tuple[TurnChunks, list[Chunk]]:
    """The turn settled waiting for a person's approval: this stream ends; the decision's stream goes on."""
    if state.done:
        return state, []
    state, out = _close_step(state)
    return replace(state, done=True), [*out, {"type": "finish", "finishReason": "tool-calls"}]


def settled(state: TurnChunks) -> tuple[TurnChunks, list[Chunk]]:
    """A turn read back from the transcript (web/ui_messages.py) is over: its open text and step are closed, as
    its stream's end closed them (what else that end sent adds no part to the message)."""
    state, out = _close_step(state)
    return replace(state, done=True), out


def step_so_far(sent: list[Chunk], more: list[Chunk]) -> list[Chunk]:
    """The open step's chunks after its `start-step`, given those before `more` (what a resume mid-step sends
    again after a `reset-step`: the AI SDK does not carry a message's open text parts over to a new stream)."""
    out = list(sent)
    for chunk in more:
        if chunk["type"] in ("start-step", "finish-step", "reset-step"):
            out = []
        else:
            out.append(chunk)
    return out


def chunks_of(turn_id: str, items: list[dict[str, Any]]) -> list[Chunk]:
    """A whole stream's chunks (`start` included), for tests and tools."""
    state = TurnChunks(turn_id)
    out = [opening(state)]
    for item in items:
        state, more = advance(state, item)
        out += more
    return out


# -- the parts ---------------------------------------------------------------------------------------


def _delta(state: TurnChunks, item: dict[str, Any], *, reasoning: bool) -> tuple[TurnChunks, list[Chunk]]:
    """A piece of live text, or of reasoning: into the attempt's open part of that kind, opened (and the other
    kind's closed) when it is not the open one."""
    key: Attempt = (str(item.get("message_id")), int(item.get("attempt") or 0))
    if key in state.discarded:  # never sent by a fenced writer; a reader that got one must not show it
        return state, []
    state, out = _enter_step(state, key[0])
    kind, part = ("reasoning", reasoning_part_id(key)) if reasoning else ("text", text_part_id(key))
    if (state.reasoning if reasoning else state.text) != key:
        state, closed = _close_text(state)
        out += [*closed, {"type": f"{kind}-start", "id": part}]
        state = replace(state, reasoning=key) if reasoning else replace(state, text=key)
    out.append({"type": f"{kind}-delta", "id": part, "delta": str(item.get("text", ""))})
    return replace(state, streamed=state.streamed | {key}, step_has_parts=True), out


def _called(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    ident = str(item.get("tool_use_id"))
    if ident in state.calls:
        return state, []
    message_id = item.get("message_id")
    state, out = _enter_step(state, str(message_id) if message_id else None)
    state, closed = _close_text(state)
    chunk = {"type": "tool-input-available", "toolCallId": ident, "toolName": str(item.get("name")),
             "input": item.get("input") or {}}  # fmt: skip
    state = replace(state, calls=(*state.calls, ident), step_calls=state.step_calls | {ident}, step_has_parts=True)
    return state, [*out, *closed, chunk]


def _decided(state: TurnChunks, item: dict[str, Any], *, approved: bool) -> tuple[TurnChunks, list[Chunk]]:
    ident = str(item.get("tool_use_id"))
    if ident not in state.asked:  # the client finds the part by its approval id: only one that was asked
        return state, []
    chunk: Chunk = {"type": "tool-approval-response", "approvalId": ident, "approved": approved}
    if item.get("reason"):
        chunk["reason"] = str(item["reason"])
    return state, [chunk]


def _result(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    ident = str(item.get("tool_use_id"))
    if ident not in state.calls or ident in state.answered:  # the client cannot place a result of a call it lacks
        return state, []
    state, out = _close_text(state)
    content = item.get("content")
    if item.get("is_error"):
        text = content if isinstance(content, str) and content else str(item.get("status") or "error")
        out.append({"type": "tool-output-error", "toolCallId": ident, "errorText": text})
    else:
        out.append({"type": "tool-output-available", "toolCallId": ident, "output": content})
    return replace(state, answered=state.answered | {ident}, after_results=True), out


def _void(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    """An attempt Baton voids (a retry discarding it, or the one a stop or failure cut): `reset-step` if the
    client holds its text. Only the open step can hold it: a step's text streams before its calls and results."""
    if item.get("attempt") is None or not item.get("message_id"):
        return state, []
    key: Attempt = (str(item["message_id"]), int(item["attempt"]))
    state = replace(state, discarded=state.discarded | {key})
    if key not in state.streamed:
        return state, []
    # No text-end first: reset-step forgets the active parts, and a text-end for one would then be an error.
    # (A step's calls come after its text, so it holds none when an attempt is voided; were it to, the client
    # drops them with the step, and so does the fold.)
    calls = tuple(c for c in state.calls if c not in state.step_calls)
    voided = replace(state, text=None, reasoning=None, streamed=frozenset(), step_has_parts=False, calls=calls,
                     step_calls=frozenset())  # fmt: skip
    return voided, [{"type": "reset-step"}]


def _stopped(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    state, out = _void(state, item)
    state, closed = _close_text(state)
    out += closed
    # A stop answers every unfinished call with the placeholder (in the transcript, without a tool.result).
    for ident in state.calls:
        if ident not in state.answered:
            out.append({"type": "tool-output-available", "toolCallId": ident, "output": INTERRUPTED_RESULT})
    state = replace(state, answered=state.answered | set(state.calls))
    out += [
        {"type": "text-start", "id": NOTICE_PART},
        {"type": "text-delta", "id": NOTICE_PART, "delta": stop_notice(item.get("reason"))},
        {"type": "text-end", "id": NOTICE_PART},
    ]
    state, closed = _close_step(state)
    return replace(state, done=True), [*out, *closed, {"type": "finish", "finishReason": "interrupted"}]


def _notice(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    """A notice the transcript holds (a failure's words, a resume, a deploy), as a text part of its own. Only the
    history (web/ui_messages.py) has such items: the live stream's stop notice comes with `turn.stopped`, in
    the same words, and its failure as an `error` chunk."""
    state, out = _close_text(state)
    text = str(item.get("text", ""))
    part = [
        {"type": "text-start", "id": NOTICE_PART},
        {"type": "text-delta", "id": NOTICE_PART, "delta": text},
        {"type": "text-end", "id": NOTICE_PART},
    ]
    return state, [*out, *part]


def _failed(state: TurnChunks, item: dict[str, Any]) -> tuple[TurnChunks, list[Chunk]]:
    state, out = _void(state, item)
    state, closed = _close_step(state)
    error = {"type": "error", "errorText": failure_text(item)}
    return replace(state, done=True), [*out, *closed, error, {"type": "finish", "finishReason": "error"}]


def failure_text(item: dict[str, Any]) -> str:
    """The transcript's words for a failure: `Failed (CLASS): MESSAGE`."""
    return f"Failed ({item.get('class') or 'unknown'}): {item.get('message') or ''}".rstrip(": ")


def _enter_step(state: TurnChunks, message_id: str | None) -> tuple[TurnChunks, list[Chunk]]:
    """Open the step `message_id` belongs to: the open one, unless results came in or another step's id shows."""
    other = message_id is not None and state.step_message_id is not None and message_id != state.step_message_id
    if state.step_open and not state.after_results and not other:
        return replace(state, step_message_id=state.step_message_id or message_id), []
    out: list[Chunk] = []
    if state.step_open and state.step_has_parts:
        state, out = _close_step(state)
    elif state.step_open:  # an emptied step: the new one's parts go in it
        return replace(state, step_message_id=message_id, after_results=False, streamed=frozenset()), []
    fresh = replace(state, step_open=True, step_message_id=message_id, step_has_parts=False, after_results=False,
                    streamed=frozenset(), step_calls=frozenset())  # fmt: skip
    return fresh, [*out, {"type": "start-step"}]


def _close_text(state: TurnChunks) -> tuple[TurnChunks, list[Chunk]]:
    """Close the open part, text or reasoning (at most one is open)."""
    out: list[Chunk] = []
    if state.reasoning is not None:
        out.append({"type": "reasoning-end", "id": reasoning_part_id(state.reasoning)})
    if state.text is not None:
        out.append({"type": "text-end", "id": text_part_id(state.text)})
    return (replace(state, text=None, reasoning=None), out) if out else (state, out)


def _close_step(state: TurnChunks) -> tuple[TurnChunks, list[Chunk]]:
    state, out = _close_text(state)
    if not state.step_open:
        return state, out
    closed = replace(state, step_open=False, step_has_parts=False, streamed=frozenset(), step_calls=frozenset())
    return closed, [*out, {"type": "finish-step"}]
