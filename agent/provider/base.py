"""The provider protocol and the records that cross it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.cancel import CancelToken
from agent.messages import TextBlock, ToolUseBlock


@dataclass(frozen=True)
class ProviderRequest:
    """One Messages API request, already in wire form."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    system: str | None = None
    max_tokens: int = 4096


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


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


TextSink = Callable[[str], None]


class Provider(Protocol):
    """Stream one answer. Raises `AttemptFailed` for a broken attempt, `Cancelled` on stop or drain."""

    def stream(self, request: ProviderRequest, *, cancel: CancelToken, on_text: TextSink | None = None) -> Answer: ...
