"""Spend: the budgets' seam. Every provider attempt reserves its worst case first and settles to what it cost after.

The loop knows nothing of where budgets live: it asks a `Spend` (Redis in tasks/store/budgets.py, None in tests
that run without budgets) to `reserve` an upper bound of the attempt's cost, which refuses with `BudgetExceeded`
when any budget of the unit would pass its limit (the attempt is then not sent), and to `settle` the reservation
to what the provider reported once the attempt ended, however it ended. Each reservation has an id of its own,
never reused (its execution's id and a counter), and a settlement applies once: settling an id twice, or one the
lost-worker sweep already settled at the worst case, changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from agent.errors import Cancelled, LeaseLostUnsent, ProviderError
from agent.history.context import BYTES_PER_TOKEN
from agent.loop.failures import FailureClass
from agent.provider.base import AttemptCut, AttemptFailed, TokenUsage
from agent.provider.price import Price, billed_tokens, cost_nanos, worst_case_nanos
from agent.provider.rate_gate import RateLimited
from agent.provider.replay import RequestFailed


@dataclass(frozen=True)
class Charge:
    """What an attempt costs (or may cost): every token a token budget counts, and nano-dollars (0 without a price)."""

    tokens: int
    nanos: int

    @classmethod
    def of(cls, usage: TokenUsage, price: Price | None) -> Charge:
        return cls(billed_tokens(usage), cost_nanos(usage, price) if price is not None else 0)


def worst_case(estimate: int, scale: float, max_tokens: int, price: Price | None) -> Charge:
    """An upper bound of an attempt's cost: its input from above, every input token at the dearest input price,
    and `max_tokens` of output.

    `estimate` is the context budget's (UTF-8 bytes of the request's JSON / 4, agent/history/context.py): a text
    token is at least one byte, so four times it bounds the text from above; `scale` (the provider's count over the
    estimate, journaled by earlier steps) raises it where the provider counted more (images).
    """
    upper = math.ceil(estimate * max(float(BYTES_PER_TOKEN), scale))
    return Charge(upper + max_tokens, worst_case_nanos(upper, max_tokens, price) if price is not None else 0)


class BudgetExceeded(RequestFailed):
    """A reservation would take a budget over its limit: the attempt was not sent. Resumable from the stored round
    once the budget allows (raised, cleared or reset)."""

    def __init__(self, message: str, *, scope: str) -> None:
        super().__init__(
            message, failure_class=FailureClass.BUDGET_EXCEEDED, retryable=False, attempts=0, usage=TokenUsage()
        )
        self.scope = scope


class Spend(Protocol):
    """The unit's budgets (every scope that applies to it, held at once)."""

    def reserve(self, worst: Charge) -> str:
        """Hold `worst` against every budget of the unit; returns the reservation's id ("" when no budget applies
        and nothing is held). Raises `BudgetExceeded` naming the first scope it would pass, here or, for a spend
        that defers its reservation to the rate gate's round trip, before the gate admits the attempt."""
        ...

    def settle(self, reservation: str, actual: Charge) -> bool:
        """Replace a reservation by what the attempt cost (once: a settled or swept reservation stays as it is).
        Returns whether a budget held it (False: none applied, or it was never made)."""
        ...


@dataclass
class Meter:
    """Reserves and settles the attempts of one send (`request_with_replay`'s `meter`); `settled` lists the
    reservations settled so far, for the step's journal record."""

    spend: Spend
    worst: Charge
    price: Price | None
    settled: list[str] = field(default_factory=list)

    def attempt(self) -> MeteredAttempt:
        return MeteredAttempt(self)


class MeteredAttempt:
    """One attempt inside its reservation: entered before anything is sent, left with what the attempt cost."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self._usage: TokenUsage | None = None
        self._reservation = ""

    def __enter__(self) -> MeteredAttempt:
        self._reservation = self._meter.spend.reserve(self._meter.worst)
        return self

    def answered(self, usage: TokenUsage) -> None:
        self._usage = usage

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._meter.spend.settle(self._reservation, self.actual(exc)):
            self._meter.settled.append(self._reservation)

    def actual(self, exc: BaseException | None) -> Charge:
        """What the attempt cost, as far as anyone can tell from how it ended: what the provider reported; nothing
        for a stop or a refusal before anything was sent; the worst case where nothing says (it may be billed)."""
        price = self._meter.price
        if exc is None:
            return Charge.of(self._usage, price) if self._usage is not None else self._meter.worst
        if isinstance(exc, (AttemptFailed, AttemptCut)):
            return Charge.of(exc.usage, price)
        if isinstance(exc, (Cancelled, ProviderError, RateLimited, LeaseLostUnsent)):
            return Charge(0, 0)  # before sending: a stop, a missing key, a wait, a lease lost in the preflight
        return self._meter.worst
