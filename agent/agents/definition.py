"""`Agent`: a product's frozen, validated definition of what answers a chat or runs a run.

A definition says nothing about Redis or Celery. Where it leaves a field unset (provider, model), the worker's
settings fill it in when the registry resolves it (agent/agents/resolved.py), so one module of agents serves a
fleet whose defaults differ per deployment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.agents.rate_limits import RateLimits
from agent.errors import BatonError
from agent.provider.price import Price
from agent.tools.definition import Tool

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
Thinking = Literal["low", "medium", "high"] | int | None
ProviderName = Literal["anthropic", "openai", "scripted"]


class AgentError(BatonError):
    """A definition that cannot be served (a duplicate name, an unknown MCP server, a bad `BATON_AGENTS`)."""

    failure_class = "agent_unknown"


class Agent(BaseModel):
    """A named definition: provider and model, instructions, tools, model settings, endpoint and queue."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=NAME_PATTERN)
    instructions: str | None = None
    """The system prompt (a coding run's comes after Baton's own). None: none."""
    provider: ProviderName | None = None
    """None: the worker's `BATON_PROVIDER`."""
    model: str | None = Field(None, min_length=1, max_length=200)
    """None: the worker's `BATON_MODEL`."""
    models: tuple[str, ...] | None = None
    """The models a caller may pick per turn; None: only `model`."""
    tools: tuple[Tool, ...] = ()
    mcp_servers: tuple[str, ...] = ()
    """Servers of `BATON_MCP_SERVERS` whose tools this agent offers."""
    max_tokens: int = Field(4096, ge=1, le=1_000_000)
    temperature: float | None = Field(None, ge=0, le=2)
    thinking: Thinking = None
    """Accepted and validated; what each provider makes of it is "Models that think and see"."""
    base_url: str | None = Field(None, pattern=r"^https?://")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The NAME of the environment variable holding this agent's key (never the key)."""
    queue: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,100}$")
    rate_limits: RateLimits | None = None
    """What the fleet keeps under on this agent's endpoint (agent/agents/rate_limits.py); None: the provider's only."""
    price: Price | None = None
    """US dollars per million tokens: usage then carries `cost_usd`, and dollar budgets apply. None: no cost."""
    upgrade: bool = False
    """True: units in flight move to a new version of this agent at their next execution, and say so."""

    @field_validator("models")
    @classmethod
    def _models_named(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not m or len(m) > 200 for m in value)):
            raise ValueError("models must list at least one model name")
        return value

    @field_validator("thinking")
    @classmethod
    def _thinking_tokens(cls, value: Thinking) -> Thinking:
        if isinstance(value, bool) or (isinstance(value, int) and not 1024 <= value <= 1_000_000):
            raise ValueError("thinking must be 'low', 'medium', 'high', None, or a number of tokens (1024 or more)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Agent:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools share a name: {sorted(n for n in names if names.count(n) > 1)[0]!r}")
        if self.model is not None and self.models is not None and self.model not in self.models:
            raise ValueError(f"model {self.model!r} is not among models {list(self.models)}")
        if self.thinking is not None and isinstance(self.thinking, int) and self.thinking >= self.max_tokens:
            raise ValueError(f"thinking ({self.thinking} tokens) must be below max_tokens ({self.max_tokens})")
        return self
