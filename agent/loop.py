"""The turn loop as named steps over one state object: ask the model, run its tools, repeat.

Every step that costs money or has an effect goes through the `Edge` journal: a step already
recorded is replayed from its record, so a redelivered turn or run re-runs only the step that was
in flight. Write tools leave a `committing` entry before their effect (the ledger), so a crash in
the middle of one is known and never blindly repeated.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agent.cancel import CancelToken
from agent.edge import Edge, EventDraft, LoopConfig
from agent.errors import BatonError, Cancelled
from agent.failures import FailureClass
from agent.history import RequestHistory
from agent.live import LiveText, NoLiveText
from agent.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from agent.policy import Driver
from agent.provider.base import Answer, Provider, ProviderRequest, TokenUsage
from agent.provider.replay import RequestFailed, RetryNotice, request_with_replay
from agent.state import LoopState
from agent.tool_round import CancelledRound, run_round
from agent.tools import Tool


class LoopFailure(BatonError):
    """The loop itself ended the turn (round ceiling, step or time budget)."""

    def __init__(self, message: str, failure_class: FailureClass) -> None:
        super().__init__(message)
        self.failure_class = failure_class


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
        _stop_unless_replaying(cancel, edge, state)
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
            results = run_round(answer.tool_uses, state, tools, edge, cancel, config)
        except CancelledRound as stopped:
            state.messages.append(Message(role="user", content=tuple(stopped.results), turn_id=config.turn_id))
            raise Cancelled(stopped.reason) from None
        state.messages.append(Message(role="user", content=tuple(results), turn_id=config.turn_id))
        state.rounds_used += 1
        _stop_unless_replaying(cancel, edge, state)


def _stop_unless_replaying(cancel: CancelToken, edge: Edge, state: LoopState) -> None:
    """Honour a stop or drain, except while the next model step is journaled: replaying it costs nothing and
    has no effect, and it rebuilds the rounds (a unit parked for approval is stopped with its rounds intact)."""
    if cancel.is_set() and edge.recorded(f"model:{state.rounds_used}") is None:
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
