"""The one state object the loop steps over; a stored round is built from it and seeds it back."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from agent.json_text import canonical
from agent.messages import Message, ToolContent
from agent.provider.base import TokenUsage


class Usage(BaseModel):
    """Tokens and attempts of a turn or run; discarded attempts are included in the token totals."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    attempts: int = 0
    discarded_attempts: int = 0
    reasoning_tokens: int | None = None  # of the output tokens, thinking: present once an API reported some
    cost_usd: float | None = None  # what the tokens cost at the agent's price (agent/provider/price.py); None: no price

    @model_serializer(mode="wrap")
    def _without_absent_reasoning(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for optional in ("reasoning_tokens", "cost_usd"):
            if out.get(optional) is None:
                out.pop(optional, None)  # usage of a unit that never thought, or has no price, keeps its shape
        return out

    def add(self, tokens: TokenUsage, *, attempts: int, discarded: int, cost_nanos: int | None = None) -> None:
        """Count attempts and what they were billed (every input figure: plain, cache writes, cache reads), and
        their cost in nano-dollars when the agent has a price."""
        if cost_nanos is not None:
            # Summed in whole nano-dollars (a float sum of dollars would drift from the budgets' integer sums).
            self.cost_usd = (round((self.cost_usd or 0.0) * 1e9) + cost_nanos) / 1e9
        self.input_tokens += tokens.input_tokens
        self.output_tokens += tokens.output_tokens
        self.cache_creation_input_tokens += tokens.cache_creation_input_tokens
        self.cache_read_input_tokens += tokens.cache_read_input_tokens
        if tokens.reasoning_tokens:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + tokens.reasoning_tokens
        self.attempts += attempts
        self.discarded_attempts += discarded


class DedupEntry(BaseModel):
    """A read call's result, valid while no write happened since (`mutations` unchanged)."""

    model_config = ConfigDict(frozen=True)

    content: ToolContent
    is_error: bool
    mutations: int


class ToolLogEntry(BaseModel):
    """The display log of tool calls: what ran, and how it ended."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    effect: str
    status: str  # "ok", "error", "deduplicated", "interrupted", "replayed"


class LoopState(BaseModel):
    """Mid-turn state. `messages` are the turn's own messages after the loaded history."""

    messages: list[Message] = Field(default_factory=list)
    rounds_used: int = 0
    dedup: dict[str, DedupEntry] = Field(default_factory=dict)
    mutations: int = 0
    executed: list[str] = Field(default_factory=list)
    tool_log: list[ToolLogEntry] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    resumed: bool = False
    reply: str | None = None
    # Model-API messages [0, elided_before) have their tool results elided (agent/history/context.py). Journaled with
    # each model step, so a replay or a resume elides exactly as the execution that sent the request did.
    elided_before: int = 0
    # Provider tokens per estimated token on the last model step (>= 1), journaled with it (agent/history/request.py).
    token_scale: float = 1.0


def dedup_key(name: str, arguments: dict[str, Any]) -> str:
    """Identical calls share a key: the tool name and its arguments in canonical JSON."""
    return f"{name}:{hashlib.sha256(canonical(arguments).encode()).hexdigest()[:24]}"


def tool_summary(state: LoopState) -> str:
    """The system message a failed turn leaves: which tool calls were already made."""
    if not state.tool_log:
        return ""
    calls = ", ".join(f"{entry.name} ({entry.status})" for entry in state.tool_log)
    return f"Tool calls made before the failure: {calls}."
