"""Baton's telemetry on OpenTelemetry: `chat MODEL` per provider attempt, `execute_tool TOOL` per call that runs,
journal replays and waits as events on the execution's span (the GenAI semantic conventions' names).

A discarded attempt is a span of its own that ends in error (`error.type` its failure class, `baton.discarded`):
the one thing a provider's own instrumentation cannot know, since the SDK sees a broken stream, not what Baton did
with it. Content (messages, tool arguments and results) only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
set to true; keys never: no attribute is built from a header, a client or the environment.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from agent.errors import Cancelled
from agent.loop.failures import classify
from agent.messages import ToolUseBlock, result_text
from agent.provider.base import Answer, AttemptFailed, Provider, ProviderRequest, TokenUsage
from agent.tools import Tool, ToolOutcome
from tasks.telemetry.content import capture_content, input_messages, output_messages, system_instructions
from tasks.telemetry.instruments import Instruments
from tasks.telemetry.offload import OFFLOAD

T = TypeVar("T")


def provider_name(provider: Provider) -> str:
    """`gen_ai.provider.name`: `anthropic`, `openai` (the conventions' names), or the provider's own word."""
    while (inner := getattr(provider, "wrapped", None)) is not None:  # a wrapper (the rate gate) names what it wraps
        provider = inner
    named = getattr(provider, "name", None)
    if isinstance(named, str) and named:
        return named
    kind = type(provider).__name__.lower()
    return kind.removesuffix("provider") or kind


def usage_attributes(usage: TokenUsage) -> dict[str, int]:
    """Usage by the conventions: `input_tokens` includes cache reads and writes, which are also given apart."""
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens + usage.cache_creation_input_tokens
        + usage.cache_read_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }


def error_type(err: BaseException) -> str:
    """`error.type` of an attempt that ended by `err`: its failure class, `cancelled` for a stop or a drain."""
    if isinstance(err, AttemptFailed):
        return str(classify(err.cause).failure_class)
    if isinstance(err, Cancelled):
        return "cancelled"
    return type(err).__qualname__


class _AttemptSpan:
    """`chat MODEL`: its attributes and measurements gathered while the attempt runs; the span is made once it ends,
    with its start time, and off the unit's thread (tasks/telemetry/offload.py): nothing runs under it."""

    def __init__(self, owner: GenAiTelemetry, provider: Provider, request: ProviderRequest, number: int) -> None:
        self._owner = owner
        self._name = f"chat {request.model}"
        self._metric = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(provider),
            "gen_ai.request.model": request.model,
        }
        attributes: dict[str, Any] = {**self._metric, "baton.attempt": number, "gen_ai.request.max_tokens":
                                      request.max_tokens}
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if owner.content:
            attributes["gen_ai.input.messages"] = input_messages(request.messages)
            if request.system:
                attributes["gen_ai.system_instructions"] = system_instructions(request.system)
        self._attributes = attributes
        self._usage: tuple[TokenUsage, dict[str, str]] | None = None
        self._parent = context.get_current()
        self._start_ns = time.time_ns()
        self._started = time.monotonic()

    def __enter__(self) -> _AttemptSpan:
        return self

    def answered(self, answer: Answer) -> Answer:
        attributes = self._attributes
        attributes.update(usage_attributes(answer.usage))
        if answer.stop_reason:
            attributes["gen_ai.response.finish_reasons"] = [answer.stop_reason]
        if answer.model:
            attributes["gen_ai.response.model"] = answer.model
        attributes["baton.discarded"] = False
        if self._owner.content:
            attributes["gen_ai.output.messages"] = output_messages(answer)
        self._usage = (answer.usage, {})
        return answer

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        extra: dict[str, str] = {}
        why: str | None = None
        if err is not None:
            why = error_type(err)
            extra = {"error.type": why}
            usage = getattr(err, "usage", None)
            self._attributes.update({"error.type": why, "baton.discarded": True})
            if isinstance(usage, TokenUsage):
                self._attributes.update(usage_attributes(usage))
                self._usage = (usage, extra)
        elapsed, end_ns = time.monotonic() - self._started, time.time_ns()
        OFFLOAD.submit(lambda: self._made(why, extra, elapsed, end_ns))

    def _made(self, why: str | None, extra: dict[str, str], elapsed: float, end_ns: int) -> None:
        owner, metric = self._owner, self._metric
        span = owner.tracer.start_span(self._name, context=self._parent, kind=SpanKind.CLIENT,
                                       attributes=self._attributes, start_time=self._start_ns)
        if why is not None:
            # The description is the class only: an SDK's message may quote a request, never put in a span.
            span.set_status(Status(StatusCode.ERROR, why))
        span.end(end_time=end_ns)
        inside = trace.set_span_in_context(span, self._parent)  # exemplars point at the attempt's span
        if self._usage is not None:
            usage, extra_of_usage = self._usage
            counted = usage_attributes(usage)
            for kind, tokens in (("input", counted["gen_ai.usage.input_tokens"]),
                                 ("output", counted["gen_ai.usage.output_tokens"])):
                owner.instruments.tokens.record(tokens, {**metric, **extra_of_usage, "gen_ai.token.type": kind},
                                                context=inside)
        if why is not None:
            owner.instruments.discarded.add(1, {**metric, **extra}, context=inside)
        owner.instruments.duration.record(elapsed, {**metric, **extra}, context=inside)


class _ToolSpan:
    """`execute_tool TOOL`, made once the call ends and off the unit's thread, as `chat MODEL` is (nothing runs under
    it: a tool runs on a thread of its own, outside the execution's context)."""

    def __init__(self, owner: GenAiTelemetry, call: ToolUseBlock, tool: Tool | None) -> None:
        self._owner = owner
        self._name = f"execute_tool {call.name}"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "baton.effect": tool.effect if tool is not None else "read",
        }
        if tool is not None and tool.server is not None:
            attributes["baton.server"] = tool.server
        if owner.content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(call.input, ensure_ascii=False)
        self._attributes = attributes
        self._status: Status | None = None
        self._parent = context.get_current()
        self._start_ns = time.time_ns()

    def __enter__(self) -> _ToolSpan:
        return self

    def ran(self, outcome: T) -> T:
        attributes = self._attributes
        if isinstance(outcome, ToolOutcome):
            attributes["baton.tool.status"] = "error" if outcome.is_error else "ok"
            if outcome.is_error:
                attributes["error.type"] = "tool_error"
                self._status = Status(StatusCode.ERROR, "tool_error")
            if self._owner.content:
                attributes["gen_ai.tool.call.result"] = result_text(outcome.content)
        else:  # withdrawn before it began, or abandoned after the grace (stop or drain)
            attributes["baton.tool.status"] = "abandoned" if outcome is None else "withdrawn"
            attributes["error.type"] = "cancelled"
            self._status = Status(StatusCode.ERROR, "cancelled")
        return outcome

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if err is not None:
            self._attributes["error.type"] = type(err).__qualname__
            self._status = Status(StatusCode.ERROR, type(err).__qualname__)
        end_ns = time.time_ns()
        OFFLOAD.submit(lambda: self._made(end_ns))

    def _made(self, end_ns: int) -> None:
        span = self._owner.tracer.start_span(self._name, context=self._parent, kind=SpanKind.INTERNAL,
                                             attributes=self._attributes, start_time=self._start_ns)
        if self._status is not None:
            span.set_status(self._status)
        span.end(end_time=end_ns)


class GenAiTelemetry:
    """`agent.telemetry.Telemetry` on an OpenTelemetry tracer and Baton's instruments."""

    def __init__(self, tracer: Tracer, instruments: Instruments, *, content: bool | None = None) -> None:
        self.tracer = tracer
        self.instruments = instruments
        self.content = capture_content(os.environ) if content is None else content

    def attempt(self, provider: Provider, request: ProviderRequest, number: int) -> _AttemptSpan:
        return _AttemptSpan(self, provider, request, number)

    def tool(self, call: ToolUseBlock, tool: Tool | None) -> _ToolSpan:
        return _ToolSpan(self, call, tool)

    def replayed(self, step: str, name: str | None = None) -> None:
        attributes = {"baton.step": step, **({"gen_ai.tool.name": name} if name is not None else {})}
        trace.get_current_span().add_event("baton.replayed", attributes)

    def waiting(self, reason: str, delay: float) -> None:
        trace.get_current_span().add_event("baton.waiting", {"baton.waiting_reason": reason, "baton.delay_s": delay})
