"""`RateLimits`: what an agent's fleet keeps under when it calls its endpoint, in any 60-second window.

The fleet shares one count per endpoint (provider, base URL, key, model) in the store (tasks/store/rate_limits.py):
a request is admitted while each window's count is under its limit (so a window holds at most one request over
it), input tokens counted at the request's estimate, output tokens at `max_tokens` until the answer says how many
it used. Agents that call one endpoint must agree on its limits (agent/agents/registry.py refuses them at start).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

WINDOW_SECONDS = 60


class RateLimits(BaseModel):
    """Per-minute limits of one endpoint; None: that dimension is not limited by Baton (the provider's still are)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests_per_minute: int | None = Field(None, ge=1)
    input_tokens_per_minute: int | None = Field(None, ge=1)
    """Counted at the request's estimate before it is sent (Baton's estimate of its prompt, cached parts included)."""
    output_tokens_per_minute: int | None = Field(None, ge=1)
    """Reserved at the request's `max_tokens`; what the answer did not use is given back when it ends."""

    @model_validator(mode="after")
    def _some(self) -> RateLimits:
        if self.requests_per_minute is None and self.input_tokens_per_minute is None and (
            self.output_tokens_per_minute is None
        ):
            raise ValueError("RateLimits needs at least one of requests_per_minute, input_tokens_per_minute, "
                             "output_tokens_per_minute")
        return self

    def as_args(self) -> list[int]:
        """The three limits as the store's script takes them (0: not limited)."""
        return [self.requests_per_minute or 0, self.input_tokens_per_minute or 0, self.output_tokens_per_minute or 0]
