"""The provider protocol and the records that cross it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.cancel import CancelToken
from agent.errors import Cancelled, CancelReason
from agent.messages import TextBlock, ToolUseBlock


@dataclass(frozen=True)
class ProviderRequest:
    """One Messages API request, already in wire form."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    # A string, or text blocks (the form that can carry `cache_control`, see agent/caching.py).
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int = 4096


@dataclass(frozen=True)
class TokenUsage:
    """What one attempt (or a sum of attempts) was billed, as the Messages API reports it.

    The three input figures are disjoint and all count toward the context window: `input_tokens` after
    the last cache breakpoint, `cache_creation_input_tokens` written to the cache (1.25x the input price),
    `cache_read_input_tokens` read from it (0.1x).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_creation_input_tokens - other.cache_creation_input_tokens,
            self.cache_read_input_tokens - other.cache_read_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the request, cached or not: what the context window holds."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def as_dict(self) -> dict[str, int]:
        """The JSON form journal records and events carry."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TokenUsage:
        """Read a stored usage; records written before the cache fields existed read them as 0."""
        data = data or {}
        return cls(
            int(data.get("input_tokens") or 0),
            int(data.get("output_tokens") or 0),
            int(data.get("cache_creation_input_tokens") or 0),
            int(data.get("cache_read_input_tokens") or 0),
        )


@dataclass(frozen=True)
class Answer:
    """A completed (message_stop) answer. Only these ever reach history."""

    message_id: str
    content: tuple[TextBlock | ToolUseBlock, ...]
    stop_reason: str | None
    usage: TokenUsage

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


class AttemptFailed(Exception):
    """One provider attempt broke; `usage` is what it reported before breaking (still billed)."""

    def __init__(self, cause: BaseException, usage: TokenUsage, *, had_output: bool) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause
        self.usage = usage
        self.had_output = had_output
        self.__cause__ = cause


class AttemptCut(Cancelled):
    """A stop or a drain cut an attempt that had reached the provider; `usage` is what it had reported.

    Still a `Cancelled` (a control-flow signal, not a failure): it only lets the loop bill the cut attempt.
    """

    def __init__(self, reason: CancelReason, usage: TokenUsage) -> None:
        super().__init__(reason)
        self.usage = usage


TextSink = Callable[[str], None]


class Provider(Protocol):
    """Stream one answer. Raises `AttemptFailed` for a broken attempt, `Cancelled` on stop or drain."""

    def stream(self, request: ProviderRequest, *, cancel: CancelToken, on_text: TextSink | None = None) -> Answer: ...
