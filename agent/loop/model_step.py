"""The model step: build the request from the journal, send it with replay, compact once if it is too long.

A step already journaled is replayed from its record. Every discarded attempt's usage is journaled as it
happens (`spent:N`), an attempt cut by a stop or a drain included, so the execution that picks the step up
still counts what earlier attempts were billed. (An attempt in flight when a worker is SIGKILLed reports
nothing to anyone: it cannot be counted.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.history.context import Fit, choose_cut, compaction_for, fit_at
from agent.history.repair import RequestHistory
from agent.history.request import RequestShape, build_request, plan_cut, token_scale
from agent.loop.cancel import CancelToken
from agent.loop.edge import Edge, EventDraft, LoopConfig, LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.live import LiveText
from agent.loop.policy import Driver
from agent.loop.state import LoopState
from agent.messages import Message, TextBlock, ToolUseBlock
from agent.provider.base import Answer, AttemptCut, Provider, TokenUsage
from agent.provider.replay import RequestFailed, RetryNotice, request_with_replay

log = logging.getLogger("baton.loop")


def model_step(
    history: list[Message],
    view: RequestHistory,
    state: LoopState,
    provider: Provider,
    tool_specs: list[dict[str, Any]],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
    live: LiveText,
    servers: Mapping[str, str] | None = None,
) -> Answer:
    """Ask the model once (or replay its journaled answer). `servers` maps an MCP tool's name to its server, which
    its `tool.called` event names."""
    step_id = f"model:{state.rounds_used}"
    recorded = edge.recorded(step_id)
    if recorded is not None:
        answer = answer_from_record(recorded)
        state.usage.add(
            TokenUsage.from_dict(recorded["usage"]),
            attempts=recorded["attempts"],
            discarded=recorded["discarded_attempts"],
        )
        state.elided_before = max(state.elided_before, int(recorded.get("elided_before", 0)))
        state.token_scale = float(recorded.get("token_scale", state.token_scale))
        return answer
    message_id = step_message_id(config, state)
    shape = RequestShape(
        config.model, tool_specs, config.system, config.prompt_cache, config.context_tokens, config.max_tokens,
        config.temperature,
    )
    # Wire form, unmarked and unelided: the cache marks and the cut are applied to copies (agent/history/request.py),
    # so the view's dicts, shared from step to step, are never changed.
    messages = view.api([*history, *state.messages])
    compact_id = f"compact:{state.rounds_used}"
    compacted = edge.recorded(compact_id)
    if compacted is not None:  # an earlier execution compacted this step: send what it sent
        fit = fit_at(
            shape.overhead, messages, max(state.elided_before, int(compacted["elided_before"])), sizes=view.sizes
        )
    else:
        fit = plan_cut(shape, messages, current=state.elided_before, scale=state.token_scale, sizes=view.sizes)
    if fit.tokens * state.token_scale > config.context_tokens:
        raise LoopFailure(
            f"the request needs about {int(fit.tokens * state.token_scale)} tokens with every old tool result elided; "
            f"the context budget (BATON_CONTEXT_TOKENS) is {config.context_tokens}",
            FailureClass.CONTEXT_OVERFLOW,
        )

    kind = "turn.retry" if config.driver is Driver.CHAT_TURN else "run.step"
    ids = {"turn_id": config.turn_id} if config.driver is Driver.CHAT_TURN else {}
    spent_id = f"spent:{state.rounds_used}"
    # Attempts at this step that earlier executions made and discarded (before a drain, say): billed all the same.
    spent = Spent.load(edge.recorded(spent_id))
    state.usage.add(spent.usage, attempts=spent.attempts, discarded=spent.attempts)

    def discard(usage: TokenUsage, events: list[EventDraft]) -> None:
        """Journal one more discarded attempt of this step (with its events) in one write."""
        nonlocal spent
        spent = spent.plus(usage)
        edge.record(spent_id, spent.record(), events)

    noticed = TokenUsage()  # what the discarded attempts of the current send reported

    def on_retry(notice: RetryNotice) -> None:
        nonlocal noticed
        noticed = noticed + notice.usage
        state.usage.add(notice.usage, attempts=1, discarded=1)
        live.discarded(message_id, notice.attempt)
        discard(notice.usage, [(kind, {**ids, **_retry_event(notice)})])

    start = live.begin(message_id)
    if start.orphaned is not None:
        # An earlier execution streamed text of this step and died before anything discarded it.
        live.discarded(message_id, start.orphaned)
        lost = {"message_id": message_id, "discarded": True, "attempt": start.orphaned, "reason": "worker lost"}
        edge.emit([(kind, {**ids, **lost, "cause": "worker_lost"})])

    def on_text(attempt: int, text: str) -> None:
        live.text(message_id, attempt, text)

    made = 0  # attempts this execution made before the current send
    compactions = 0 if compacted is not None else 1  # one per step, whichever execution made it
    while True:
        request = build_request(shape, messages, cut=fit.cut)
        before = state.usage.model_copy()
        noticed = TokenUsage()
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
                first_attempt=start.attempts_before + made + 1,
            )
        except AttemptCut as cut:
            # A stop or drain cut an attempt the provider had started on: count it, journaled for the next execution.
            state.usage.add(cut.usage, attempts=1, discarded=1)
            discard(cut.usage, [])
            raise
        except RequestFailed as failed:
            # The attempt that ended the request was made (and billed) too: count every attempt, once.
            state.usage = before
            state.usage.add(failed.usage, attempts=failed.attempts, discarded=failed.discarded_attempts)
            refit = _compacted(failed, shape, messages, fit) if compactions else None
            if refit is None:
                raise
            # "prompt is too long": elide more, journal the decision (a replay sends the same bytes), re-send once.
            compactions, made, fit = compactions - 1, made + failed.attempts, refit
            attempt = start.attempts_before + made
            live.discarded(message_id, attempt)
            notice = {
                "message_id": message_id,
                "discarded": True,
                "attempt": attempt,
                "class": str(FailureClass.CONTEXT_OVERFLOW),
                "reason": f"{failed}; compacting: old tool results elided before message {fit.cut}",
                "had_output": False,
                "delay": 0.0,
            }
            edge.record(compact_id, {"kind": "compact", "status": "decided", "elided_before": fit.cut}, [])
            discard(failed.usage - noticed, [(kind, {**ids, **notice})])
            continue
        break
    state.elided_before = fit.cut
    answer = outcome.answer
    # The provider's count of this request calibrates the next step's estimate (journaled, so replays agree).
    state.token_scale = token_scale(answer.usage.prompt_tokens, fit.tokens)
    live.ended(message_id)
    state.usage.add(answer.usage, attempts=1, discarded=0)
    usage = spent.usage + answer.usage
    log.info(
        "model step %s: %d attempts; input %d, cache writes %d, cache reads %d, output %d tokens",
        step_id, spent.attempts + 1, usage.input_tokens, usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens, usage.output_tokens,
    )
    record = {
        "kind": "model",
        "status": "done",
        "message_id": answer.message_id,
        "content": [b.model_dump() for b in answer.content],
        "stop_reason": answer.stop_reason,
        "usage": usage.as_dict(),  # every attempt of this step, discarded ones and earlier executions' included
        "attempts": spent.attempts + 1,
        "discarded_attempts": spent.attempts,
        "elided_before": fit.cut,
        "token_scale": state.token_scale,
        "unit_usage": state.usage.model_dump(),
    }
    servers = servers if servers is not None else {}  # a lookup may be empty yet answer (a stand-in names its server)
    events: list[EventDraft] = [
        (
            "tool.called",
            {
                "turn_id": config.turn_id,
                "tool_use_id": b.id,
                "name": b.name,
                "input": b.input,
                **({"server": servers[b.name]} if b.name in servers else {}),
            },
        )
        for b in answer.tool_uses
    ]
    if config.driver is Driver.CODING_RUN:
        step = {"step": step_id, "kind": "model", "tools": [b.name for b in answer.tool_uses], "usage": usage.as_dict()}
        events.insert(0, ("run.step", step))
    # An answer without tool calls ends the loop: the unit's settle follows, and may carry this step's write.
    edge.record(step_id, record, events, last=not answer.tool_uses)
    return answer


@dataclass(frozen=True)
class Spent:
    """The discarded attempts of one model step so far, across executions (journaled as `spent:N`)."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    attempts: int = 0

    @classmethod
    def load(cls, record: dict[str, Any] | None) -> Spent:
        if record is None:
            return cls()
        return cls(TokenUsage.from_dict(record.get("usage")), int(record.get("attempts", 0)))

    def plus(self, usage: TokenUsage) -> Spent:
        return Spent(self.usage + usage, self.attempts + 1)

    def record(self) -> dict[str, Any]:
        return {"kind": "spent", "status": "spent", "usage": self.usage.as_dict(), "attempts": self.attempts}


def _compacted(failed: RequestFailed, shape: RequestShape, messages: list[dict[str, Any]], fit: Fit) -> Fit | None:
    """The fit to re-send after the provider said the request is too long for the window ("prompt is too long",
    "maximum context length"), or None when eliding more cannot make it fit."""
    if FailureClass(failed.failure_class) is not FailureClass.CONTEXT_OVERFLOW:
        return None
    plan = compaction_for(failed.overflow, sent_estimate=fit.tokens, budget=shape.context_tokens)
    refit = choose_cut(shape.overhead, messages, current=fit.cut, budget=plan.target, target=plan.target)
    if refit.cut <= fit.cut or refit.tokens > plan.ceiling:
        return None
    return refit


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
        "usage": notice.usage.as_dict(),  # what the discarded attempt was billed
    }


def answer_from_record(record: dict[str, Any]) -> Answer:
    content: list[TextBlock | ToolUseBlock] = []
    for block in record["content"]:
        content.append(TextBlock(**block) if block["type"] == "text" else ToolUseBlock(**block))
    usage = TokenUsage.from_dict(record["usage"])
    return Answer(record.get("message_id", ""), tuple(content), record.get("stop_reason"), usage)
