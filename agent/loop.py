"""The turn loop as named steps over one state object: ask the model, run its tools, repeat.

Every step that costs money or has an effect goes through the `Edge` journal: a step already
recorded is replayed from its record, so a redelivered turn or run re-runs only the step that was
in flight. Write tools leave a `committing` entry before their effect (the ledger), so a crash in
the middle of one is known and never blindly repeated.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agent.cancel import CancelToken
from agent.context import result_cap_chars
from agent.edge import Edge, EventDraft, LoopConfig, LoopFailure
from agent.errors import Cancelled
from agent.failures import FailureClass
from agent.live import LiveText, NoLiveText
from agent.messages import INTERRUPTED_RESULT, Message, TextBlock, ToolResultBlock, ToolUseBlock
from agent.model_step import answer_from_record, model_step, step_message_id
from agent.policy import Driver
from agent.provider.base import Provider
from agent.state import DedupEntry, LoopState, ToolLogEntry, dedup_key
from agent.tools import RESULT_CAP_CHARS, Tool, ToolOutcome, cap_result, execute

__all__ = ["Edge", "EventDraft", "LoopConfig", "LoopFailure", "answer_from_record", "run_loop", "step_message_id"]


def run_loop(
    history: list[Message],
    state: LoopState,
    *,
    provider: Provider,
    tools: dict[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
    live: LiveText | None = None,
) -> LoopState:
    """Run rounds until the model answers without tool calls; the reply lands in `state.reply`."""
    tool_specs = [t.to_api() for t in tools.values()]
    live = live or NoLiveText()
    while True:
        cancel.raise_if_set()
        if config.deadline is not None and time.monotonic() > config.deadline:
            raise LoopFailure("the run used its wall-clock budget", FailureClass.BUDGET_EXCEEDED)
        answer = model_step(history, state, provider, tool_specs, edge, cancel, config, live)
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


def _tool_round(
    calls: tuple[ToolUseBlock, ...],
    state: LoopState,
    tools: dict[str, Tool],
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
    tools: dict[str, Tool],
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
    # Capped when recorded (head and tail kept), tighter under a small context budget.
    content = cap_result(outcome.content, result_cap_chars(config.context_tokens, RESULT_CAP_CHARS))
    block = ToolResultBlock(tool_use_id=call.id, content=content, is_error=outcome.is_error, synthesized=synthesized)
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
