"""The model step: build the request from the journal, send it with replay, compact once if it is too long.

Four named steps over the loop's state: a step already journaled is replayed from its record; else the request's
fit is planned (an earlier execution's compaction of the step included), sent with replay (compacting once on
"prompt is too long"), and the answer journaled with its events. The attempts' accounting is one `Attempts` ledger
(agent/loop/attempts.py), which journals every discarded attempt as it happens (`spent:N`) and, with budgets,
sends each attempt inside a reservation of the unit's budgets (agent/loop/spend.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from agent.history.binding import prefix_digest
from agent.history.context import Fit, choose_cut, compaction_for, fit_at
from agent.history.repair import RequestHistory
from agent.history.request import RequestShape, build_request, overhead, plan_cut, token_scale
from agent.loop.attempts import Attempts, Spent
from agent.loop.cancel import CancelToken
from agent.loop.edge import Edge, EventDraft, LoopConfig, LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.live import LiveText
from agent.loop.policy import Driver
from agent.loop.spend import BudgetExceeded, Spend
from agent.loop.state import LoopState
from agent.messages import AnswerBlock, Message, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from agent.provider.base import Answer, AttemptCut, Provider, ProviderRequest, TokenUsage
from agent.provider.price import Price, cost_nanos
from agent.provider.replay import RequestFailed, request_with_replay
from agent.telemetry import telemetry

__all__ = ["Spent", "answer_from_record", "model_step", "step_message_id"]

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
    spend: Spend | None = None,
    unasked: Mapping[str, str] | None = None,
) -> Answer:
    """Ask the model once (or replay its journaled answer). `servers` maps an MCP tool's name to its server, which
    its `tool.called` event names; `spend`: the unit's budgets, which every attempt reserves from and settles to;
    `unasked`: the effect (`read` or `write`) of each tool that runs without an approval (how the answer is written
    depends on what its calls do first: `record_answer`)."""
    recorded = edge.recorded(f"model:{state.rounds_used}")
    if recorded is not None:
        telemetry().replayed(f"model:{state.rounds_used}")  # an event on the execution's span, not a span
        return replay_step(recorded, state, config.price)
    message_id = step_message_id(config, state)
    plan = plan_request(history, view, state, tool_specs, edge, config)
    attempts = Attempts.open(edge, state, config, live, message_id, may_compact=not plan.compacted, spend=spend)
    answer, fit, request = send(provider, plan, attempts, cancel, config)
    answer = bound_to(answer, request)
    record_answer(answer, fit, attempts, state, edge, config, servers, unasked)
    return answer


def replay_step(recorded: dict[str, Any], state: LoopState, price: Price | None = None) -> Answer:
    """The answer of a step an earlier execution journaled, its usage and elision taken back into the state (its
    budget reservations were settled when it ran: a replay charges nothing)."""
    answer = answer_from_record(recorded)
    usage = TokenUsage.from_dict(recorded["usage"])
    state.usage.add(
        usage,
        attempts=recorded["attempts"],
        discarded=recorded["discarded_attempts"],
        cost_nanos=cost_nanos(usage, price) if price is not None else None,
    )
    state.elided_before = max(state.elided_before, int(recorded.get("elided_before", 0)))
    state.token_scale = float(recorded.get("token_scale", state.token_scale))
    return answer


@dataclass(frozen=True)
class RequestPlan:
    """What a step sends: the unit's request shape, the messages in wire form, and the elision cut that fits."""

    shape: RequestShape
    messages: list[dict[str, Any]]
    fit: Fit
    compacted: bool  # an earlier execution compacted this step: its compaction is spent


def plan_request(
    history: list[Message],
    view: RequestHistory,
    state: LoopState,
    tool_specs: list[dict[str, Any]],
    edge: Edge,
    config: LoopConfig,
) -> RequestPlan:
    """The request's fit: the journaled compaction's cut if an earlier execution made one, else the planned cut;
    raises a context overflow when even that cannot fit the context budget."""
    shape = RequestShape(
        config.model, tool_specs, config.system, config.prompt_cache, config.context_tokens, config.max_tokens,
        config.temperature, config.thinking,
    )
    # Wire form, unmarked and unelided: the cache marks and the cut are applied to copies (agent/history/request.py),
    # so the view's dicts, shared from step to step, are never changed.
    messages = view.api([*history, *state.messages])
    compacted = edge.recorded(f"compact:{state.rounds_used}")
    if compacted is not None:  # an earlier execution compacted this step: send what it sent
        fit = fit_at(
            overhead(shape, view.sizes), messages, max(state.elided_before, int(compacted["elided_before"])),
            sizes=view.sizes,
        )
    else:
        fit = plan_cut(shape, messages, current=state.elided_before, scale=state.token_scale, sizes=view.sizes)
    if fit.tokens * state.token_scale > config.context_tokens:
        raise LoopFailure(
            f"the request needs about {int(fit.tokens * state.token_scale)} tokens with every old tool result elided; "
            f"the context budget (BATON_CONTEXT_TOKENS) is {config.context_tokens}",
            FailureClass.CONTEXT_OVERFLOW,
        )
    return RequestPlan(shape, messages, fit, compacted is not None)


def send(
    provider: Provider, plan: RequestPlan, attempts: Attempts, cancel: CancelToken, config: LoopConfig
) -> tuple[Answer, Fit, ProviderRequest]:
    """Send the planned request with replay; on "prompt is too long", elide more and re-send, once per step.
    Returns the answer, the fit it was sent with and the request that got it."""
    fit = plan.fit
    while True:
        request = build_request(plan.shape, plan.messages, cut=fit.cut)
        first_attempt = attempts.sending()
        try:
            outcome = request_with_replay(
                provider,
                request,
                message_id=attempts.message_id,
                budget=config.retry_budget,
                backoff=config.backoff,
                cancel=cancel,
                driver=config.driver,
                on_retry=attempts.retried,
                on_text=attempts.text,
                on_reasoning=attempts.reasoning,
                first_attempt=first_attempt,
                meter=attempts.meter(fit.tokens),
            )
        except BudgetExceeded:
            raise  # nothing was sent: the attempts before it are counted and journaled already
        except AttemptCut as cut:
            attempts.cut(cut.usage)
            raise
        except RequestFailed as failed:
            attempts.failed(failed)
            refit = _compacted(failed, plan.shape, plan.messages, fit) if attempts.may_compact else None
            if refit is None:
                raise
            attempts.compacted(failed, refit.cut)
            fit = refit
            continue
        return outcome.answer, fit, request


def bound_to(answer: Answer, request: ProviderRequest) -> Answer:
    """The answer with its signed reasoning bound to the prefix it was produced after (the whole request): what later
    requests check before they send it back (agent/history/binding.py). Unsigned reasoning has nothing to bind."""
    if not any(isinstance(b, RedactedThinkingBlock) or (isinstance(b, ThinkingBlock) and b.signature)
               for b in answer.content):  # fmt: skip
        return answer
    digest = prefix_digest(request.system, request.tools, request.messages)
    content = tuple(
        b.model_copy(update={"bound_to": digest})
        if isinstance(b, RedactedThinkingBlock) or (isinstance(b, ThinkingBlock) and b.signature) else b
        for b in answer.content
    )  # fmt: skip
    return replace(answer, content=content)


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


def record_answer(
    answer: Answer,
    fit: Fit,
    attempts: Attempts,
    state: LoopState,
    edge: Edge,
    config: LoopConfig,
    servers: Mapping[str, str] | None,
    unasked: Mapping[str, str] | None = None,
) -> None:
    """Journal the step's answer with what every attempt of it cost, and its `tool.called` events, in one write:
    sent ahead of its calls when the first of them reads, part of its write-ahead entry when it writes
    (`Edge.record`; `unasked`: the effect of each tool that runs without an approval)."""
    step_id = f"model:{state.rounds_used}"
    state.elided_before = fit.cut
    # The provider's count of this request calibrates the next step's estimate (journaled, so replays agree).
    state.token_scale = token_scale(answer.usage.prompt_tokens, fit.tokens)
    usage = attempts.answered(answer)
    # A step answered at its first attempt is the common case, told by the unit's settle line with the unit's
    # totals; one that needed more is worth its own line. (Two log lines a turn were ~0.1 ms of a pool child's.)
    log.log(
        logging.INFO if attempts.spent.attempts else logging.DEBUG,
        "model step %s: %d attempts; input %d, cache writes %d, cache reads %d, output %d tokens",
        step_id, attempts.spent.attempts + 1, usage.input_tokens, usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens, usage.output_tokens,
    )
    record = {
        "kind": "model",
        "status": "done",
        "message_id": answer.message_id,
        "content": [b.model_dump() for b in answer.content],
        "stop_reason": answer.stop_reason,
        "usage": usage.as_dict(),  # every attempt of this step, discarded ones and earlier executions' included
        **({"reservations": reservations} if (reservations := attempts.reservations()) else {}),
        "attempts": attempts.spent.attempts + 1,
        "discarded_attempts": attempts.spent.attempts,
        "elided_before": fit.cut,
        "token_scale": state.token_scale,
        "unit_usage": state.usage.model_dump(),
    }
    events = _answer_events(answer, step_id, attempts.usage_dict(usage), config, servers)
    # An answer without tool calls ends the loop: the unit's settle follows, and may carry this step's write.
    calls, effects = answer.tool_uses, unasked or {}
    edge.record(
        step_id, record, events, last=not calls,
        reads_next=bool(calls) and effects.get(calls[0].name) == "read",
        writes_next=bool(calls) and effects.get(calls[0].name) == "write",
    )


def _answer_events(
    answer: Answer, step_id: str, usage: dict[str, Any], config: LoopConfig, servers: Mapping[str, str] | None
) -> list[EventDraft]:
    """A `tool.called` event per call the answer makes; a coding run's `run.step` before them."""
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
        step = {"step": step_id, "kind": "model", "tools": [b.name for b in answer.tool_uses], "usage": usage}
        events.insert(0, ("run.step", step))
    return events


def step_message_id(config: LoopConfig, state: LoopState) -> str:
    """The id of the model step the loop is at: stable across its attempts and the executions that replay it."""
    return f"{config.message_prefix or config.turn_id}:m{state.rounds_used}"


def answer_from_record(record: dict[str, Any]) -> Answer:
    """The answer a journaled model record holds."""
    content = tuple(ANSWER_BLOCK.validate_python(block) for block in record["content"])
    usage = TokenUsage.from_dict(record["usage"])
    return Answer(record.get("message_id", ""), content, record.get("stop_reason"), usage)


# A journaled answer's blocks, read back as they were recorded (reasoning included, signatures untouched).
ANSWER_BLOCK: TypeAdapter[AnswerBlock] = TypeAdapter(
    Annotated[TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock, Field(discriminator="type")]
)
