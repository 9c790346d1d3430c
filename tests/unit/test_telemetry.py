"""The telemetry's pure parts and its spans on the SDK's in-memory exporter (no network, no worker)."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent import telemetry as core
from agent.errors import Cancelled
from agent.loop.failures import classify
from agent.messages import TextBlock, ToolUseBlock
from agent.provider.base import Answer, AttemptFailed, ProviderRequest, TokenUsage
from agent.tools import ToolOutcome, tool
from tasks.execution.settling import Outcome
from tasks.telemetry import content, switch
from tasks.telemetry.content import input_messages
from tasks.telemetry.genai import GenAiTelemetry, provider_name, usage_attributes
from tasks.telemetry.instruments import Instruments
from tasks.telemetry.marks import Mark, cause_of, next_cause, outcome_name
from tasks.telemetry.offload import OFFLOAD, Offload


class AnthropicProvider:
    def stream(self, request, *, cancel, on_text=None, on_reasoning=None):
        raise AssertionError("not called")


@tool(effect="write")
def save(note: str) -> str:
    """Save a note."""
    return "saved"


REQUEST = ProviderRequest(model="claude-test", messages=[{"role": "user", "content": "the user's words"}])
ANSWER = Answer("m1", (TextBlock(text="the answer's words"),), "end_turn", TokenUsage(10, 5, 2, 3),
                "claude-test-20261201")


@pytest.fixture
def traced():
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    traces = TracerProvider()
    traces.add_span_processor(SimpleSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[reader])

    def make(content: bool = False) -> GenAiTelemetry:
        return GenAiTelemetry(traces.get_tracer("t"), Instruments(meters.get_meter("t")), content=content)

    yield make, exporter, reader
    traces.shutdown()
    meters.shutdown()


def test_wanted_only_with_an_endpoint_or_an_exporter_and_never_when_disabled():
    """The standard variables decide; empty values count as unset; OTEL_SDK_DISABLED wins."""
    assert not switch.wanted({})
    assert not switch.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
    assert switch.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert switch.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not switch.wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
    assert content.capture_content({content.CAPTURE_CONTENT: "True"})
    assert not content.capture_content({content.CAPTURE_CONTENT: "1"})


def test_the_default_telemetry_is_one_shared_no_op():
    """Without an installed implementation every hook answers the same object and returns what it is given."""
    nothing = core.NoTelemetry()
    call = ToolUseBlock(id="t1", name="save", input={})
    assert nothing.attempt(AnthropicProvider(), REQUEST, 1) is nothing.tool(call, None)
    with nothing.attempt(AnthropicProvider(), REQUEST, 1) as span:
        assert span.answered(ANSWER) is ANSWER
    assert isinstance(core.telemetry(), core.NoTelemetry)


def test_marks_round_trip_and_say_why_the_next_execution_runs():
    """The record's `otel` field: read back as written, garbage ignored; the cause follows the last outcome."""
    mark = Mark("00-" + "a" * 32 + "-" + "b" * 16 + "-01", None, 2, "drain")
    assert Mark.load(mark.dump()) == mark and Mark.load(mark.dump().encode()) == mark
    assert Mark.load("not json") is None and Mark.load(None) is None
    assert cause_of(None) == "first"
    assert cause_of(mark) == "drain"
    assert cause_of(Mark(mark.span, None, 1)) == "worker_lost"  # it started and never said how it ended
    assert next_cause(Outcome("requeue", "platform interrupt")) == "drain"
    assert next_cause(Outcome("auto_resume", "provider_rate_limited: resuming from the stored round")) == "rate_limited"
    assert next_cause(Outcome("auto_resume", "provider_overloaded: resuming from the stored round")) == "retry"
    assert next_cause(Outcome("done", "waiting")) == "approval"
    assert next_cause(Outcome("done", "completed")) is None
    assert [outcome_name(Outcome(a, r)) for a, r in [("done", "failed"), ("requeue", ""), ("drop", "x")]] == [
        "failed", "interrupted", "dropped"]


def test_usage_by_the_conventions_counts_cache_in_the_input():
    assert usage_attributes(TokenUsage(10, 5, 2, 3)) == {
        "gen_ai.usage.input_tokens": 15,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.cache_creation.input_tokens": 2,
    }
    assert provider_name(AnthropicProvider()) == "anthropic"


def test_an_answered_attempt_and_a_discarded_one(traced):
    """An attempt that answers is a `chat MODEL` span with usage and finish reasons; one that broke ends in error
    with its failure class and `baton.discarded`, and is counted in `baton.attempts.discarded`."""
    make, exporter, reader = traced
    telemetry = make()
    with telemetry.attempt(AnthropicProvider(), REQUEST, 1) as span:
        span.answered(ANSWER)
    broken = AttemptFailed(ConnectionResetError("peer closed"), TokenUsage(4, 1), had_output=True)
    with pytest.raises(AttemptFailed), telemetry.attempt(AnthropicProvider(), REQUEST, 2):
        raise broken
    with pytest.raises(Cancelled), telemetry.attempt(AnthropicProvider(), REQUEST, 3):
        raise Cancelled("drain")
    OFFLOAD.flush()  # the leaf spans are made off the unit's thread
    answered, discarded, cut = exporter.get_finished_spans()
    assert answered.name == "chat claude-test" and answered.attributes["gen_ai.provider.name"] == "anthropic"
    assert answered.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert answered.attributes["gen_ai.response.model"] == "claude-test-20261201"
    assert answered.attributes["baton.discarded"] is False and answered.status.status_code is StatusCode.UNSET
    assert discarded.status.status_code is StatusCode.ERROR and discarded.attributes["baton.discarded"] is True
    assert discarded.attributes["error.type"] == str(classify(broken.cause).failure_class)
    assert discarded.attributes["baton.attempt"] == 2
    assert discarded.attributes["gen_ai.usage.input_tokens"] == 4
    assert cut.attributes["error.type"] == "cancelled"
    assert "peer closed" not in (discarded.status.description or "")  # the class only, never the SDK's message
    for span in (answered, discarded):
        assert "gen_ai.input.messages" not in span.attributes and "gen_ai.output.messages" not in span.attributes
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "baton.attempts.discarded"} <= names


def test_content_only_when_asked(traced):
    make, exporter, _ = traced
    telemetry = make(content=True)
    with telemetry.attempt(AnthropicProvider(), REQUEST, 1) as span:
        span.answered(ANSWER)
    call = ToolUseBlock(id="t1", name="save", input={"note": "n"})
    with telemetry.tool(call, save) as span:
        span.ran(ToolOutcome("saved"))
    OFFLOAD.flush()
    attempt, ran = exporter.get_finished_spans()
    assert json.loads(attempt.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "the user's words"}]}]
    assert "the answer's words" in attempt.attributes["gen_ai.output.messages"]
    assert ran.name == "execute_tool save" and ran.attributes["baton.effect"] == "write"
    assert ran.attributes["gen_ai.tool.call.result"] == "saved"


def test_a_replayed_step_is_an_event_on_the_current_span_not_a_span(traced):
    make, exporter, _ = traced
    telemetry = make()
    tracer = telemetry.tracer
    with tracer.start_as_current_span("invoke_agent default"):
        telemetry.replayed("tool:t1", "save")
        telemetry.waiting("provider_rate_limited", 2.0)
    [execution] = exporter.get_finished_spans()
    assert [(e.name, dict(e.attributes)) for e in execution.events] == [
        ("baton.replayed", {"baton.step": "tool:t1", "gen_ai.tool.name": "save"}),
        ("baton.waiting", {"baton.waiting_reason": "provider_rate_limited", "baton.delay_s": 2.0}),
    ]


def test_input_messages_as_the_conventions_parts():
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "save", "input": {"note": "n"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "saved"}]},
    ]
    assert json.loads(input_messages(messages)) == [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "t1", "name": "save", "arguments": {"note": "n"}}]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "t1", "response": "saved"}]},
    ]


def test_a_provider_behind_the_rate_gate_is_named_as_itself() -> None:
    """The fleet's rate gate wraps every provider when sharing is on: a span names the provider, not the gate
    (red in CI: `gen_ai.provider.name` was 'limited')."""
    from agent.provider.rate_gate import LimitedProvider

    class AnthropicProvider:  # the name the real one is known by
        pass

    gated = LimitedProvider(AnthropicProvider(), None, limits=None, max_wait=5.0)  # type: ignore[arg-type]
    assert provider_name(gated) == "anthropic"


def test_the_offload_makes_what_it_was_given_in_order_and_survives_a_failure():
    """Work handed over runs on the offload's own thread within a round, in order; one that raises is logged and
    the rest still run; a flush runs what waits on the calling thread (a child's exit)."""
    import threading

    done: list[int] = []
    ran = threading.Event()
    offload = Offload(interval=0.01)

    def broken() -> None:
        raise RuntimeError("a span that could not be made")

    offload.submit(lambda: done.append(1))
    offload.submit(broken)
    offload.submit(lambda: (done.append(2), ran.set()))
    assert ran.wait(5) and done == [1, 2]
    held = Offload(interval=3600.0)  # its thread will not come round within the test
    held.submit(lambda: done.append(3))
    held.flush()
    assert done == [1, 2, 3]
