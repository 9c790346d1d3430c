"""The wait before sending: every attempt to an endpoint asks the fleet's shared count first (the `Gate`, in the store).

`LimitedProvider` wraps a provider: before each attempt it asks the gate to admit it (the endpoint's own waits, a
429's `retry-after` or a limit at 0 until its reset, and the agent's `RateLimits`), waits in the worker while the
total stays within `max_wait` (`BATON_RATE_WAIT`), and beyond that raises `RateLimited` so the unit goes back to the
queue with that delay. A wait is not an attempt: nothing is sent, billed or counted against the retry budget. After
the attempt the output tokens it reserved at `max_tokens` and did not use are given back. What each answer's
headers say is reported to the gate by the provider itself (`HeadersSink`), since only it holds the response.

A 429 is still an attempt (sent, refused, replayed within the budget), but its `retry-after` is the fleet's wait
now, shared through the gate: the replay backs off as for any failure (`FleetWaits` carries no retry-after) and the
next attempt's admission waits for the rest, in the worker up to `max_wait` or back in the queue, instead of the
replay holding the worker for as long as the provider asked.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.agents.rate_limits import RateLimits
from agent.errors import Cancelled
from agent.history.context import request_tokens
from agent.loop.cancel import CancelToken
from agent.loop.failures import Classified, FailureClass, classify, register_classifier
from agent.provider.base import Answer, AttemptCut, AttemptFailed, Endpoint, Provider, ProviderRequest, TextSink
from agent.telemetry import telemetry

log = logging.getLogger("baton.provider")

# (model, response headers) of every answer an endpoint gives, a refusal's included.
HeadersSink = Callable[[str, Mapping[str, str]], None]

# Where each SDK goes, and the variables it reads its key from, when an agent names neither.
_DEFAULTS = {
    "anthropic": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com", ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")),
    "openai": ("OPENAI_BASE_URL", "https://api.openai.com/v1", ("OPENAI_API_KEY",)),
}


class RateLimited(Exception):  # a control-flow signal, like `Cancelled`: not a failure
    """The endpoint asks for a wait longer than the worker may hold the unit: back to the queue for `delay` s."""

    def __init__(self, delay: float, reason: str) -> None:
        super().__init__(f"rate limited ({reason}): waiting {delay:.1f}s")
        self.delay = delay
        self.reason = reason


class FleetWaits(Exception):  # not an error of its own: a 429 whose wait the gate keeps now
    """A provider's 429, its wait shared with the fleet: classified `provider_rate_limited` without a retry-after."""

    def __init__(self, refusal: BaseException) -> None:
        super().__init__(f"{type(refusal).__name__}: {refusal}; the endpoint's wait is shared with the fleet")
        self.__cause__ = refusal


@register_classifier
def _classify(exc: BaseException) -> Classified | None:
    # RateLimited is handled where it is raised to (the unit goes back to the queue); should one escape, it is still
    # what it says.
    if isinstance(exc, RateLimited):
        return Classified(FailureClass.PROVIDER_RATE_LIMITED, retry_after=exc.delay)
    if isinstance(exc, FleetWaits):
        return Classified(FailureClass.PROVIDER_RATE_LIMITED)
    return None


@dataclass(frozen=True)
class Admission:
    """The gate's answer: admitted, or how long to wait before asking again and which limit says so."""

    admitted: bool
    wait: float = 0.0
    reason: str = ""


class Gate(Protocol):
    """The fleet's shared count of one endpoint per model (tasks/store/rate_limits.py)."""

    def admit(self, model: str, limits: RateLimits | None, reservation: str, input_tokens: int,
              output_tokens: int) -> Admission:
        """Admit one request now (and count it under `limits`), or say how long until it could be."""
        ...

    def settle(self, model: str, reservation: str, output_tokens: int) -> None:
        """The admitted request used `output_tokens`: give back what it reserved beyond them."""
        ...


def endpoint_identity(provider: str, endpoint: Endpoint) -> str:
    """Who shares one provider's limits: provider, base URL and a hash of the key (never the key), as the SDK
    resolves them (the agent's, else the SDK's variables, else its default)."""
    url_variable, default_url, key_variables = _DEFAULTS.get(provider, ("", "", ()))
    base_url = endpoint.base_url or (os.environ.get(url_variable) if url_variable else None) or default_url
    key = endpoint.key() or next((os.environ[v] for v in key_variables if os.environ.get(v)), "")
    key_hash = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{provider}|{base_url.rstrip('/')}|{key_hash}"


class LimitedProvider:
    """`inner`, each attempt admitted by `gate` first (see the module)."""

    def __init__(self, inner: Provider, gate: Gate, *, limits: RateLimits | None, max_wait: float) -> None:
        self._inner, self._gate, self._limits, self._max_wait = inner, gate, limits, max_wait

    @property
    def wrapped(self) -> Provider:
        """The provider this gate guards: what a trace names (a gate is not a provider of its own)."""
        return self._inner

    def stream(
        self,
        request: ProviderRequest,
        *,
        cancel: CancelToken,
        on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer:
        reservation = self._admit(request, cancel)
        used = 0
        try:
            answer = self._inner.stream(request, cancel=cancel, on_text=on_text, on_reasoning=on_reasoning)
            used = answer.usage.output_tokens
            return answer
        except AttemptFailed as failed:
            used = failed.usage.output_tokens
            if classify(failed.cause).failure_class is FailureClass.PROVIDER_RATE_LIMITED:
                raise AttemptFailed(FleetWaits(failed.cause), failed.usage, had_output=failed.had_output)  # noqa: B904
            raise
        except AttemptCut as cut:
            used = cut.usage.output_tokens
            raise
        finally:
            if self._limits is not None and self._limits.output_tokens_per_minute is not None:
                self._gate.settle(request.model, reservation, used)

    def _admit(self, request: ProviderRequest, cancel: CancelToken) -> str:
        """Wait until the gate admits the request (up to `max_wait` in all), or raise `RateLimited`."""
        reservation = uuid.uuid4().hex
        limits = self._limits
        estimate = 0
        if limits is not None and limits.input_tokens_per_minute is not None:
            estimate = request_tokens(request.tools, request.system, request.messages)
        waited = 0.0
        while True:
            cancel.raise_if_set()
            admission = self._gate.admit(request.model, limits, reservation, estimate, request.max_tokens)
            if admission.admitted:
                return reservation
            if waited + admission.wait > self._max_wait:
                raise RateLimited(admission.wait, admission.reason)
            telemetry().waiting("rate_limited", admission.wait)
            if cancel.wait(admission.wait):
                raise Cancelled(cancel.reason or "stop")
            waited += admission.wait
