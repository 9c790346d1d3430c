"""`Price`: what an agent's tokens cost, and the pure functions that turn usage into dollars.

Prices are US dollars per million tokens, one per billed figure (plain input, output, cache writes, cache reads).
Costs are computed in whole nano-dollars (1e-9 USD): every price with up to three decimals then costs an exact
integer per token, sums of attempts never drift, and the budgets' Lua scripts (tasks/store/budgets.py) add them
as integers. `cost_usd` is that integer over 1e9.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent.provider.base import TokenUsage

NANOS_PER_USD = 1_000_000_000
_NANOS_PER_TOKEN_AT_ONE_USD_PER_MILLION = NANOS_PER_USD // 1_000_000  # 1 USD per million tokens = 1000 n$/token


class Price(BaseModel):
    """US dollars per million tokens. `cache_write` and `cache_read` default to the input price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)
    cache_write: float | None = Field(None, ge=0, le=10_000)
    """Anthropic bills a cache write at 1.25x the input price; None: the input price."""
    cache_read: float | None = Field(None, ge=0, le=10_000)
    """Anthropic bills a cache read at 0.1x the input price; None: the input price."""

    @property
    def write(self) -> float:
        return self.input if self.cache_write is None else self.cache_write

    @property
    def read(self) -> float:
        return self.input if self.cache_read is None else self.cache_read

    @property
    def highest_input(self) -> float:
        """The most one input token can cost: what a worst case charges every input token at."""
        return max(self.input, self.write, self.read)


def _nanos(tokens: int, per_million: float) -> int:
    return round(tokens * per_million * _NANOS_PER_TOKEN_AT_ONE_USD_PER_MILLION)


def cost_nanos(usage: TokenUsage, price: Price) -> int:
    """What `usage` cost at `price`, in nano-dollars (each figure at its own price)."""
    return (
        _nanos(usage.input_tokens, price.input)
        + _nanos(usage.output_tokens, price.output)
        + _nanos(usage.cache_creation_input_tokens, price.write)
        + _nanos(usage.cache_read_input_tokens, price.read)
    )


def cost_usd(usage: TokenUsage, price: Price) -> float:
    """What `usage` cost at `price`, in US dollars."""
    return cost_nanos(usage, price) / NANOS_PER_USD


def worst_case_nanos(input_tokens: int, max_tokens: int, price: Price) -> int:
    """The most an attempt of `input_tokens` (an upper bound) answering up to `max_tokens` can cost: every input
    token at the highest input price (a cache write, where that is the dearest), every output token billed."""
    return _nanos(input_tokens, price.highest_input) + _nanos(max_tokens, price.output)


def billed_tokens(usage: TokenUsage) -> int:
    """Every token a token budget counts: input, output, cache writes and cache reads."""
    return usage.prompt_tokens + usage.output_tokens
