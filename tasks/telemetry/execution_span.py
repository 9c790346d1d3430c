"""The OpenTelemetry side of an execution's span (imported only once the SDK is set up)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from agent import telemetry as core
from agent.loop.policy import Driver
from tasks.store.fenced import Batch
from tasks.telemetry.genai import GenAiTelemetry
from tasks.telemetry.marks import FIELD, TERMINAL_OUTCOMES, Mark, cause_of, next_cause, outcome_name

if TYPE_CHECKING:
    import redis

    from tasks.execution.settling import Outcome, Unit
    from tasks.store.fenced import Fence
    from tasks.store.records import UnitRecord


def traceparent(span: Span) -> str:
    """The W3C `traceparent` of `span`."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def span_context(value: str) -> trace.SpanContext:
    return trace.get_current_span(propagate.extract({"traceparent": value})).get_span_context()


def unit_attributes(unit: Unit) -> dict[str, str]:
    """`baton.chat_id` and `baton.turn_id` of a turn, `baton.run_id` of a run."""
    ident = unit.owner_id.partition(":")[2]
    if unit.driver is Driver.CHAT_TURN:
        return {"baton.chat_id": ident, "baton.turn_id": unit.unit_id}
    return {"baton.run_id": ident}


class OtelExecution:
    def __init__(
        self,
        client: redis.Redis,
        fence: Fence,
        unit: Unit,
        rec: UnitRecord,
        record: dict[bytes | str, bytes | str],
        now: float,
    ) -> None:
        self._client, self._fence, self._unit, self._rec, self._now = client, fence, unit, rec, now
        raw = record.get(FIELD.encode()) or record.get(FIELD)
        self._previous = Mark.load(raw)
        self._token: object | None = None
        telemetry = core.telemetry()
        assert isinstance(telemetry, GenAiTelemetry)  # switch.on(): the SDK installed it
        self._telemetry = telemetry

    def __enter__(self) -> OtelExecution:
        previous, rec, unit = self._previous, self._rec, self._unit
        cause = cause_of(previous)
        number = previous.execution + 1 if previous is not None else 1
        parent = context.get_current()
        sender = trace.get_current_span(parent).get_span_context()
        continued = traceparent(trace.get_current_span(parent)) if sender.is_valid else None
        if continued is None and previous is not None and previous.parent:
            # A Celery retry or defer carries no headers of the first message: the unit's trace goes on from the
            # context its first execution continued.
            continued = previous.parent
            parent = propagate.extract({"traceparent": continued})
        links = []
        if previous is not None:
            before = span_context(previous.span)
            if before.is_valid:
                links.append(Link(before, {"baton.link": "previous_execution", "baton.execution": previous.execution}))
        agent = rec.agent or "default"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            **unit_attributes(unit),
            "baton.execution": number,
            "baton.cause": cause,
            "baton.kind": "turn" if unit.driver is Driver.CHAT_TURN else "run",
        }
        if rec.model:
            attributes["gen_ai.request.model"] = rec.model
        self._span = span = self._telemetry.tracer.start_span(
            f"invoke_agent {agent}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )
        self._token = context.attach(trace.set_span_in_context(span, parent))
        self._mark = Mark(traceparent(span), continued, number)
        # Written with the execution's next fenced write (its start, a journaled step or its settle), not in a round
        # trip of its own (one a turn, ~2 % of a short turn's latency). An execution that dies before that write
        # leaves the mark of the one before: nothing is lost, since its own span, never ended, is never exported.
        self._fence.hold(Batch().hset(unit.record_key, {FIELD: self._mark.dump()}, raw=True))
        instruments = self._telemetry.instruments
        kind = {"baton.kind": attributes["baton.kind"]}
        if cause == "first" and rec.created_at:
            instruments.queue_wait.record(max(0.0, self._now - rec.created_at), kind)
        if cause in ("worker_lost", "drain"):
            # Counted by the execution that resumes the unit: a drained worker is shutting down, and what it records
            # last leaves with a flush at its exit that a busy machine can cut short (seen in a CI-shaped run).
            instruments.interruptions.add(1, {"baton.cause": cause, **kind})
        return self

    def ended(self, outcome: Outcome, rec: UnitRecord) -> Outcome:
        span, kind = self._span, "turn" if self._unit.driver is Driver.CHAT_TURN else "run"
        agent = rec.agent or "default"  # resolved by now (a unit naming no agent learns its chat's at its start)
        name = outcome_name(outcome)
        span.update_name(f"invoke_agent {agent}")
        span.set_attributes({"gen_ai.agent.name": agent, "baton.outcome": name})
        if rec.agent_version:
            span.set_attribute("baton.agent_version", rec.agent_version)
        if rec.model:
            span.set_attribute("gen_ai.request.model", rec.model)
        if name == "failed":
            why = rec.failure.failure_class if rec.failure is not None else "failed"
            span.set_attribute("error.type", str(why))
            span.set_status(Status(StatusCode.ERROR, str(why)))
        if name == "waiting":
            span.add_event("baton.waiting", {"baton.waiting_reason": "approval"})
        following = next_cause(outcome)
        if following is not None:
            # Written before the task's retry or defer is published, so the next execution reads it.
            mark = Mark(self._mark.span, self._mark.parent, self._mark.execution, following)
            self._client.hset(self._unit.record_key, FIELD, mark.dump())
        instruments = self._telemetry.instruments
        if name in TERMINAL_OUTCOMES:
            instruments.units.add(1, {"baton.kind": kind, "gen_ai.agent.name": agent, "baton.outcome": name})
        return outcome

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if err is not None:
            self._span.set_attribute("error.type", type(err).__qualname__)
            self._span.set_status(Status(StatusCode.ERROR, type(err).__qualname__))
        if self._token is not None:
            context.detach(self._token)  # type: ignore[arg-type]
        self._span.end()
