"""The turn loop as named steps over one state object: ask the model, run its tools, repeat.

Every step that costs money or has an effect goes through the `Edge` journal: a step already
recorded is replayed from its record, so a redelivered turn or run re-runs only the step that was
in flight. Write tools leave a `committing` entry before their effect (the ledger), so a crash in
the middle of one is known and never blindly repeated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent.cancel import CancelToken
from agent.errors import BatonError, Cancelled
from agent.failures import FailureClass
from agent.history import RequestHistory
from agent.live import LiveText, NoLiveText
from agent.messages import INTERRUPTED_RESULT, Message, TextBlock, ToolResultBlock, ToolUseBlock
from agent.policy import Backoff, Driver
from agent.provider.base import Answer, Provider, ProviderRequest, TokenUsage
from agent.provider.replay import RequestFailed, RetryNotice, request_with_replay
from agent.state import DedupEntry, LoopState, ToolLogEntry, dedup_key
from agent.tools import Tool, ToolOutcome, execute

EventDraft = tuple[str, dict[str, Any]]


class Edge(Protocol):
    """Where the loop's steps are journaled and its events published (Redis in `tasks`)."""

    def recorded(self, step_id: str) -> dict[str, Any] | None:
        """The journaled record of a step, if any."""
        ...

    def record(self, step_id: str, record: dict[str, Any], events: list[EventDraft]) -> None:
        """Journal one step and publish its events in one write."""
        ...

    def emit(self, events: list[EventDraft]) -> None:
        """Publish events now (live progress that must not wait for the next step)."""
        ...


class LoopFailure(BatonError):
    """The loop itself ended the turn (round ceiling, step or time budget)."""

    def __init__(self, message: str, failure_class: FailureClass) -> None:
        super().__init__(message)
        self.failure_class = failure_class


@dataclass(frozen=True)
class LoopConfig:
    owner_id: str
    turn_id: str
    driver: Driver
    model: str
    max_rounds: int
    retry_budget: int
    backoff: Backoff
    system: str | None = None
    deadline: float | None = None  # time.monotonic() value after which a run stops with budget_exceeded
    stop_grace: float = 1.0  # how long a stop lets a running tool finish before abandoning it
    drain_grace: float = 2.0  # how long a drain lets a running tool settle
    # Message ids start with this (default: the turn id). A fresh start of a unit (not a resume) uses a new
    # prefix, so its steps never share an id, and so live text, with steps of an earlier, failed generation.
    message_prefix: str | None = None


def run_loop(
    history: list[Message],
    state: LoopState,
    *,
    provider: Provider,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
    live: LiveText | None = None,
) -> LoopState:
    """Run rounds until the model answers without tool calls; the reply lands in `state.reply`."""
    tool_specs = [t.to_api() for t in tools.values()]
    live = live or NoLiveText()
    view = RequestHistory()  # the request's history, grown round by round instead of rebuilt
    while True:
        cancel.raise_if_set()
        if config.deadline is not None and time.monotonic() > config.deadline:
            raise LoopFailure("the run used its wall-clock budget", FailureClass.BUDGET_EXCEEDED)
        answer = _model_step(history, view, state, provider, tool_specs, edge, cancel, config, live)
        content = answer.content or (TextBlock(text="(no answer)"),)
        message_id = step_message_id(config, state)
        state.messages.append(Message(role="assistant", content=content, turn_id=config.turn_id, message_id=message_id))
        if not answer.tool_uses:
            state.reply = answer.text
            return state
        if state.rounds_used >= config.max_rounds:
            state.messages.append(
                Message(
                    role="user",
                    content=tuple(
                        ToolResultBlock(tool_use_id=b.id, content="Tool round limit reached; not run.", is_error=True)
                        for b in answer.tool_uses
                    ),
                    turn_id=config.turn_id,
                )
            )
            failure = FailureClass.ROUND_CEILING if config.driver is Driver.CHAT_TURN else FailureClass.BUDGET_EXCEEDED
            raise LoopFailure(f"used all {config.max_rounds} tool rounds", failure)
        try:
            results = _tool_round(answer.tool_uses, state, tools, edge, cancel, config)
        except _CancelledRound as stopped:
            state.messages.append(Message(role="user", content=tuple(stopped.results), turn_id=config.turn_id))
            raise Cancelled(stopped.reason) from None
        state.messages.append(Message(role="user", content=tuple(results), turn_id=config.turn_id))
        state.rounds_used += 1
        cancel.raise_if_set()


def _model_step(
    history: list[Message],
    view: RequestHistory,
    state: LoopState,
    provider: Provider,
    tool_specs: list[dict[str, Any]],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
    live: LiveText,
) -> Answer:
    step_id = f"model:{state.rounds_used}"
    recorded = edge.recorded(step_id)
    if recorded is not None:
        answer = answer_from_record(recorded)
        state.usage.add(
            input_tokens=recorded["usage"]["input_tokens"],
            output_tokens=recorded["usage"]["output_tokens"],
            attempts=recorded["attempts"],
            discarded=recorded["discarded_attempts"],
        )
        return answer
    message_id = step_message_id(config, state)
    request = ProviderRequest(
        model=config.model,
        messages=view.api([*history, *state.messages]),
        tools=tool_specs,
        system=config.system,
    )

    kind = "turn.retry" if config.driver is Driver.CHAT_TURN else "run.step"
    ids = {"turn_id": config.turn_id} if config.driver is Driver.CHAT_TURN else {}

    def on_retry(notice: RetryNotice) -> None:
        state.usage.add(
            input_tokens=notice.usage.input_tokens, output_tokens=notice.usage.output_tokens, attempts=1, discarded=1
        )
        live.discarded(message_id, notice.attempt)
        edge.emit([(kind, {**ids, **_retry_event(notice)})])

    start = live.begin(message_id)
    if start.orphaned is not None:
        # An earlier execution streamed text of this step and died before anything discarded it.
        live.discarded(message_id, start.orphaned)
        lost = {"message_id": message_id, "discarded": True, "attempt": start.orphaned, "reason": "worker lost"}
        edge.emit([(kind, {**ids, **lost, "cause": "worker_lost"})])

    def on_text(attempt: int, text: str) -> None:
        live.text(message_id, attempt, text)

    before = state.usage.model_copy()
    try:
        outcome = request_with_replay(
            provider,
            request,
            message_id=message_id,
            budget=config.retry_budget,
            backoff=config.backoff,
            cancel=cancel,
            driver=config.driver,
            on_retry=on_retry,
            on_text=on_text,
            first_attempt=start.attempts_before + 1,
        )
    except RequestFailed as failed:
        # The attempt that ended the request was made (and billed) too: count every attempt, once.
        state.usage = before
        state.usage.add(
            input_tokens=failed.usage.input_tokens,
            output_tokens=failed.usage.output_tokens,
            attempts=failed.attempts,
            discarded=failed.discarded_attempts,
        )
        raise
    answer = outcome.answer
    live.ended(message_id)
    state.usage.add(
        input_tokens=answer.usage.input_tokens, output_tokens=answer.usage.output_tokens, attempts=1, discarded=0
    )
    record = {
        "kind": "model",
        "status": "done",
        "message_id": answer.message_id,
        "content": [b.model_dump() for b in answer.content],
        "stop_reason": answer.stop_reason,
        "usage": {"input_tokens": outcome.usage.input_tokens, "output_tokens": outcome.usage.output_tokens},
        "attempts": outcome.attempts,
        "discarded_attempts": outcome.discarded_attempts,
    }
    events: list[EventDraft] = [
        ("tool.called", {"turn_id": config.turn_id, "tool_use_id": b.id, "name": b.name, "input": b.input})
        for b in answer.tool_uses
    ]
    if config.driver is Driver.CODING_RUN:
        events.insert(0, ("run.step", {"step": step_id, "kind": "model", "tools": [b.name for b in answer.tool_uses]}))
    edge.record(step_id, record, events)
    return answer


def step_message_id(config: LoopConfig, state: LoopState) -> str:
    """The id of the model step the loop is at: stable across its attempts and the executions that replay it."""
    return f"{config.message_prefix or config.turn_id}:m{state.rounds_used}"


def _retry_event(notice: RetryNotice) -> dict[str, Any]:
    return {
        "message_id": notice.message_id,
        "discarded": True,
        "attempt": notice.attempt,
        "class": str(notice.failure_class),
        "reason": notice.reason,
        "had_output": notice.had_output,
        "delay": round(notice.delay, 3),
    }


def answer_from_record(record: dict[str, Any]) -> Answer:
    content: list[TextBlock | ToolUseBlock] = []
    for block in record["content"]:
        content.append(TextBlock(**block) if block["type"] == "text" else ToolUseBlock(**block))
    usage = TokenUsage(record["usage"]["input_tokens"], record["usage"]["output_tokens"])
    return Answer(record.get("message_id", ""), tuple(content), record.get("stop_reason"), usage)


def _tool_round(
    calls: tuple[ToolUseBlock, ...],
    state: LoopState,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
) -> list[ToolResultBlock]:
    results: list[ToolResultBlock] = []
    for index, call in enumerate(calls):
        if cancel.is_set():
            # Calls after a stop never start; the history still needs an answer for each.
            results += [_placeholder(c.id) for c in calls[index:]]
            raise _CancelledRound(cancel.reason or "stop", results)
        block = _tool_step(call, state, tools, edge, cancel, config)
        results.append(block)
        if block.synthesized and cancel.is_set():
            results += [_placeholder(c.id) for c in calls[index + 1 :]]
            raise _CancelledRound(cancel.reason or "stop", results)
    return results


class _CancelledRound(Cancelled):
    """A cancellation that carries the results gathered so far, so the round can be closed cleanly."""

    def __init__(self, reason: Any, results: list[ToolResultBlock]) -> None:
        super().__init__(reason)
        self.results = results


def _placeholder(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=INTERRUPTED_RESULT, synthesized=True)


def _tool_step(
    call: ToolUseBlock,
    state: LoopState,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
) -> ToolResultBlock:
    step_id = f"tool:{call.id}"
    tool = tools.get(call.name)
    effect = tool.effect if tool is not None else "read"
    recorded = edge.recorded(step_id)
    if recorded is not None and recorded["status"] == "done":
        block = ToolResultBlock(
            tool_use_id=call.id,
            content=recorded["content"],
            is_error=recorded["is_error"],
            synthesized=recorded.get("synthesized", False),
        )
        _account(state, call, effect, block, status=recorded.get("log_status", "ok"), executed=True)
        return block
    if tool is None:
        outcome, status = ToolOutcome(f"unknown tool {call.name!r}", is_error=True), "error"
    elif recorded is not None and recorded["status"] == "committing" and not tool.idempotent:
        # The effect may or may not have happened; running it again could do it twice.
        outcome, status = ToolOutcome(INTERRUPTED_RESULT), "interrupted"
    elif effect == "read" and _fresh(state, call):
        entry = state.dedup[dedup_key(call.name, call.input)]
        outcome, status = ToolOutcome(entry.content, entry.is_error), "deduplicated"
    else:
        idempotency_key = f"{config.owner_id}:{call.id}"
        if effect == "write" and recorded is None:
            edge.record(step_id, {"kind": "tool", "status": "committing", "name": call.name}, [])
        ran = _run_cancellable(tool, call.input, idempotency_key, cancel, config)
        if ran is None:
            block = _placeholder(call.id)
            _account(state, call, effect, block, status="interrupted", executed=True)
            return block
        outcome, status = ran, "error" if ran.is_error else "ok"
    synthesized = status == "interrupted"
    block = ToolResultBlock(
        tool_use_id=call.id, content=outcome.content, is_error=outcome.is_error, synthesized=synthesized
    )
    _account(state, call, effect, block, status=status, executed=status in ("ok", "error"))
    record = {
        "kind": "tool",
        "status": "done",
        "name": call.name,
        "content": block.content,
        "is_error": block.is_error,
        "synthesized": synthesized,
        "log_status": status,
    }
    events: list[EventDraft] = [
        (
            "tool.result",
            {
                "turn_id": config.turn_id,
                "tool_use_id": call.id,
                "name": call.name,
                "status": status,
                "is_error": block.is_error,
            },
        )
    ]
    if config.driver is Driver.CODING_RUN:
        events.insert(0, ("run.step", {"step": step_id, "kind": "tool", "name": call.name, "status": status}))
    edge.record(step_id, record, events)
    return block


def _fresh(state: LoopState, call: ToolUseBlock) -> bool:
    entry = state.dedup.get(dedup_key(call.name, call.input))
    return entry is not None and entry.mutations == state.mutations


def _account(
    state: LoopState, call: ToolUseBlock, effect: str, block: ToolResultBlock, *, status: str, executed: bool
) -> None:
    """The bookkeeping every path shares, so a replayed step leaves the same state as a live one."""
    if executed:
        state.executed.append(call.name)
    if effect == "write" and status != "deduplicated":
        state.mutations += 1
    elif status in ("ok", "error"):
        state.dedup[dedup_key(call.name, call.input)] = DedupEntry(
            content=block.content, is_error=block.is_error, mutations=state.mutations
        )
    state.tool_log.append(ToolLogEntry(id=call.id, name=call.name, effect=effect, status=status))


def _run_cancellable(
    tool: Tool, arguments: dict[str, Any], key: str, cancel: CancelToken, config: LoopConfig
) -> ToolOutcome | None:
    """Run a tool in a thread; on stop or drain give it a grace period, then abandon it (None)."""
    box: list[ToolOutcome] = []
    settled = threading.Event()
    woken = threading.Event()  # set by the tool finishing or by a stop/drain, whichever comes first

    def target() -> None:
        box.append(execute(tool, arguments, idempotency_key=key))
        settled.set()
        woken.set()

    unregister = cancel.on_cancel(woken.set)
    threading.Thread(target=target, name=f"tool:{tool.name}", daemon=True).start()
    try:
        woken.wait()
        if not settled.is_set():
            settled.wait(config.drain_grace if cancel.reason == "drain" else config.stop_grace)
    finally:
        unregister()
    return box[0] if box else None
