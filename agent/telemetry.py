"""What the core tells a tracer: each provider attempt, each tool call that runs, each step replayed, each wait.

The core calls `telemetry()` at those few places and nothing else; by default it answers a no-op that imports
nothing and allocates nothing per call, so a worker without OpenTelemetry pays two attribute lookups a step. A
worker whose `OTEL_*` variables ask for traces installs the OpenTelemetry implementation (tasks/telemetry/genai.py)
after its fork. The spans' context is the caller's (contextvars): the execution's span is current while the loop
runs, so an attempt's or a tool's span is its child with nothing passed down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from agent.messages import ToolUseBlock
    from agent.provider.base import Answer, Provider, ProviderRequest
    from agent.tools import Tool

T = TypeVar("T")


class AttemptSpan(Protocol):
    """One provider attempt (`chat MODEL`); leaving it by an exception marks the attempt discarded."""

    def __enter__(self) -> AttemptSpan: ...

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None: ...

    def answered(self, answer: Answer) -> Answer:
        """The attempt's stream completed: record what it answered; returns `answer`."""
        ...


class ToolSpan(Protocol):
    """One tool call that runs (`execute_tool TOOL`)."""

    def __enter__(self) -> ToolSpan: ...

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None: ...

    def ran(self, outcome: T) -> T:
        """What the call came to (a `ToolOutcome`, or not started, or abandoned); returns `outcome`."""
        ...


class Telemetry(Protocol):
    def attempt(self, provider: Provider, request: ProviderRequest, number: int) -> AttemptSpan:
        """A span around one attempt of `request` (numbered across the step's executions)."""
        ...

    def tool(self, call: ToolUseBlock, tool: Tool | None) -> ToolSpan:
        """A span around one tool call that runs (never one answered from the journal)."""
        ...

    def replayed(self, step: str, name: str | None = None) -> None:
        """A step answered from the journal: an event on the current execution's span, never a span."""
        ...

    def waiting(self, reason: str, delay: float) -> None:
        """A wait (a rate limit's backoff): an event on the current span, not a span held open."""
        ...


class _Nothing:
    """The no-op spans: one shared instance, entered and left for nothing."""

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        return None

    def answered(self, answer: Answer) -> Answer:
        return answer

    def ran(self, outcome: T) -> T:
        return outcome


_NOTHING = _Nothing()


class NoTelemetry:
    """The default: no spans, no events, no imports."""

    def attempt(self, provider: Provider, request: ProviderRequest, number: int) -> AttemptSpan:
        return _NOTHING

    def tool(self, call: ToolUseBlock, tool: Tool | None) -> ToolSpan:
        return _NOTHING

    def replayed(self, step: str, name: str | None = None) -> None:
        return None

    def waiting(self, reason: str, delay: float) -> None:
        return None


_installed: list[Telemetry] = [NoTelemetry()]


def telemetry() -> Telemetry:
    """This process's telemetry (the no-op unless one was installed)."""
    return _installed[0]


def install(implementation: Telemetry) -> None:
    """Make `implementation` this process's telemetry (a worker does it after its fork, once the SDK is set up)."""
    _installed[0] = implementation


def uninstall() -> None:
    """Back to the no-op (tests, and a process whose SDK was shut down)."""
    _installed[0] = NoTelemetry()
