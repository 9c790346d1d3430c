"""The provider seam: the protocol every provider implements and the records that cross it.

Above this edge everything is Baton's own and provider-neutral: the history, journal, transcript, events and
page hold assistant `tool_use` and user `tool_result` blocks with Baton's ids, whatever model API ran a turn,
so a chat can change provider between turns. A provider is one module (`agent/provider/<name>_provider.py`
with its `<name>_errors.py`) that owns everything about its API, and nothing else knows which one runs:

1. the body: its API's request built from a `ProviderRequest` (a pure function, unit-tested);
2. the stream: its API's events reduced into one `Answer` (text and `ToolUseBlock`s, `TokenUsage` in Baton's
   four fields), text passed to `on_text` and reasoning to `on_reasoning` as they arrive; only a stream its API
   says is complete becomes an Answer, anything less raises `AttemptFailed` (never a tool call from a broken stream);
3. its failures: a classifier of its SDK's and transport's exceptions into `FailureClass`, registered with
   `agent.loop.failures.register_classifier` when its module is imported (a too-long request is `context_overflow`
   with the sizes it stated, so the loop compacts once);
4. its credentials: `credentials_problem()` for the warning at worker start, and a `provider_auth`
   `ProviderError` naming the variable, raised before anything is sent;
5. the rest of the contract of `Provider.stream`: its SDK's own retries off (the one budget is
   `agent/provider/replay.py`'s), a stall surfacing as a read timeout after the idle timeout, a stop or drain
   closing the response at once (`AttemptCut`), one client per worker process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.errors import Cancelled, CancelReason
from agent.loop.cancel import CancelToken
from agent.messages import AnswerBlock, TextBlock, ToolUseBlock


@dataclass(frozen=True)
class ProviderRequest:
    """Baton's neutral request: a pure function of the journal, the same bytes on every replay.

    `messages` are in Baton's shape (user/assistant turns whose content is text, `tool_use` and `tool_result`
    blocks, as the Messages API spells them; every `tool_use` is answered by a `tool_result` in the next user
    message, placeholders included). `cache_control` marks on blocks, tools and the system prompt are
    breakpoint hints (agent/history/caching.py): a provider with explicit caching honours them, one that caches by
    itself drops them. Each provider turns this into its own API's body.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    # A string, or text blocks (the form that can carry `cache_control`, see agent/history/caching.py).
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int = 4096
    temperature: float | None = None  # None: the API's default, not sent
    # The agent's thinking (None: off): "low", "medium", "high" or a number of tokens; each provider maps it.
    thinking: str | int | None = None
    # The messages keep thinking blocks whose prefix Baton changed and the API must drop itself (a provider that binds
    # thinking to its prefix asks for that; agent/history/binding.py).
    drop_stale_thinking: bool = False


@dataclass(frozen=True)
class Endpoint:
    """Where an agent's provider calls go: its base URL (None: the SDK's own, or its `*_BASE_URL` variable) and the
    NAME of the environment variable holding its key (None: the SDK's own lookup). The key itself is read from the
    environment when a client is built, and never travels in a definition, a record or a request."""

    base_url: str | None = None
    api_key_env: str | None = None

    def key(self) -> str | None:
        return (os.environ.get(self.api_key_env) or None) if self.api_key_env else None

    def missing_key(self) -> str:
        return f"no key for this agent's provider: set {self.api_key_env} in the workers' environment"


@dataclass(frozen=True)
class TokenUsage:
    """What one attempt (or a sum of attempts) was billed, in Baton's four fields (each provider maps its own).

    The three input figures are disjoint and all count toward the context window: `input_tokens` after
    the last cache breakpoint, `cache_creation_input_tokens` written to the cache (1.25x the input price),
    `cache_read_input_tokens` read from it (0.1x).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    reasoning_tokens: int = 0  # of `output_tokens`, what the model spent thinking, where the API says so

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_creation_input_tokens - other.cache_creation_input_tokens,
            self.cache_read_input_tokens - other.cache_read_input_tokens,
            self.reasoning_tokens - other.reasoning_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the request, cached or not: what the context window holds."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def as_dict(self) -> dict[str, int]:
        """The JSON form journal records and events carry."""
        out = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }
        if self.reasoning_tokens:  # only where the API reported some: records without thinking keep their shape
            out["reasoning_tokens"] = self.reasoning_tokens
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TokenUsage:
        """Read a stored usage; records written before the cache fields existed read them as 0."""
        data = data or {}
        return cls(
            int(data.get("input_tokens") or 0),
            int(data.get("output_tokens") or 0),
            int(data.get("cache_creation_input_tokens") or 0),
            int(data.get("cache_read_input_tokens") or 0),
            int(data.get("reasoning_tokens") or 0),
        )


@dataclass(frozen=True)
class Answer:
    """A completed answer (the provider's stream said it ended). Only these ever reach history."""

    message_id: str
    content: tuple[AnswerBlock, ...]  # in the order the model produced them, its reasoning first
    stop_reason: str | None
    usage: TokenUsage
    model: str = ""  # the model the provider says answered (`gen_ai.response.model`); "" when it did not say

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


TextSink = Callable[[str], None]  # a piece of live text (or, as `on_reasoning`, of live reasoning), in order


class Provider(Protocol):
    """Stream one answer. Raises `AttemptFailed` for a broken attempt (its cause classified by the provider's
    registered classifier), `AttemptCut` or `Cancelled` on stop or drain. `on_reasoning` sees the reasoning the model
    streams as text (a thinking block's, a compatible server's `reasoning_content`), `on_text` its answer's text."""

    def stream(
        self,
        request: ProviderRequest,
        *,
        cancel: CancelToken,
        on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer: ...
