"""The attempts of one model step: the ledger of what they were billed and which were discarded.

Every discarded attempt's usage is journaled as it happens (`spent:N`), an attempt cut by a stop or a drain
included, so the execution that picks the step up still counts what earlier attempts were billed. (An attempt in
flight when a worker is SIGKILLed reports nothing to anyone: it cannot be counted.)

With budgets (`Spend`, agent/loop/spend.py) every attempt is sent inside a reservation of its worst case and
settled after; the ids of the reservations a step settled are journaled with it (`spent:N`, then `model:N`), beside
the usage they were settled to. A replayed step sends nothing, so it reserves and charges nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.loop.edge import Edge, EventDraft, LoopConfig
from agent.loop.failures import FailureClass
from agent.loop.live import LiveText, StepStart
from agent.loop.policy import Driver
from agent.loop.spend import Meter, Spend, worst_case
from agent.loop.state import LoopState
from agent.provider.base import Answer, TokenUsage
from agent.provider.price import Price, cost_nanos, cost_usd
from agent.provider.replay import RequestFailed, RetryNotice


@dataclass(frozen=True)
class Spent:
    """The discarded attempts of one model step so far, across executions (journaled as `spent:N`)."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    attempts: int = 0
    reservations: tuple[str, ...] = ()  # the budget reservations these attempts were settled under

    @classmethod
    def load(cls, record: dict[str, Any] | None) -> Spent:
        if record is None:
            return cls()
        settled = tuple(record.get("reservations", ()))
        return cls(TokenUsage.from_dict(record.get("usage")), int(record.get("attempts", 0)), settled)

    def plus(self, usage: TokenUsage, reservations: list[str]) -> Spent:
        return Spent(self.usage + usage, self.attempts + 1, (*self.reservations, *reservations))

    def record(self) -> dict[str, Any]:
        out = {"kind": "spent", "status": "spent", "usage": self.usage.as_dict(), "attempts": self.attempts}
        return {**out, "reservations": list(self.reservations)} if self.reservations else out


class Attempts:
    """The ledger of one model step's attempts in this execution.

    It counts every attempt into `state.usage` once, journals each discarded one as it happens (with the event
    that says so), numbers the attempts on from earlier executions', and holds the step's one compaction.
    """

    def __init__(
        self,
        edge: Edge,
        state: LoopState,
        config: LoopConfig,
        live: LiveText,
        message_id: str,
        *,
        may_compact: bool,
        spend: Spend | None = None,
    ) -> None:
        self.message_id = message_id
        self.spent = Spent()  # the step's discarded attempts, earlier executions' included
        self.may_compact = may_compact  # one compaction per step, whichever execution made it
        self._edge, self._state, self._live = edge, state, live
        self._spent_id = f"spent:{state.rounds_used}"
        self._compact_id = f"compact:{state.rounds_used}"
        chat = config.driver is Driver.CHAT_TURN
        self._kind = "turn.retry" if chat else "run.step"
        self._ids = {"turn_id": config.turn_id} if chat else {}
        self._start = StepStart(0)
        self._made = 0  # attempts this execution made before the current send
        self._noticed = TokenUsage()  # what the discarded attempts of the current send reported
        self._before = state.usage  # the unit's usage before the current send
        self._price: Price | None = config.price
        self._max_tokens = config.max_tokens
        self._spend = spend
        self._settled: list[str] = []  # reservations this execution settled for the step, in order
        self._journaled = 0  # of `_settled`, how many a journal record holds already

    @classmethod
    def open(
        cls,
        edge: Edge,
        state: LoopState,
        config: LoopConfig,
        live: LiveText,
        message_id: str,
        *,
        may_compact: bool,
        spend: Spend | None = None,
    ) -> Attempts:
        """The ledger of a step about to be sent: earlier executions' discarded attempts counted, its live text
        begun, and an attempt a lost worker left streaming discarded."""
        attempts = cls(edge, state, config, live, message_id, may_compact=may_compact, spend=spend)
        # Attempts at this step that earlier executions made and discarded (before a drain, say): billed all the same.
        attempts.spent = Spent.load(edge.recorded(attempts._spent_id))
        spent = attempts.spent
        nanos = attempts.nanos(spent.usage)
        state.usage.add(spent.usage, attempts=spent.attempts, discarded=spent.attempts, cost_nanos=nanos)
        attempts._start = start = live.begin(message_id)
        if start.orphaned is not None:
            # An earlier execution streamed text of this step and died before anything discarded it.
            live.discarded(message_id, start.orphaned)
            lost = {"message_id": message_id, "discarded": True, "attempt": start.orphaned, "reason": "worker lost"}
            edge.emit([attempts._event({**lost, "cause": "worker_lost"})])
        return attempts

    def nanos(self, usage: TokenUsage) -> int | None:
        """What `usage` cost at the agent's price, in nano-dollars (None: the agent has no price)."""
        return cost_nanos(usage, self._price) if self._price is not None else None

    def usage_dict(self, usage: TokenUsage) -> dict[str, Any]:
        """`usage` as events carry it: the token figures, and `cost_usd` when the agent has a price."""
        out: dict[str, Any] = usage.as_dict()
        if self._price is not None:
            out["cost_usd"] = cost_usd(usage, self._price)
        return out

    def meter(self, estimate: int) -> Meter | None:
        """The budgets' meter for a send of a request estimated at `estimate` tokens (None: no budgets here)."""
        if self._spend is None:
            return None
        worst = worst_case(estimate, self._state.token_scale, self._max_tokens, self._price)
        return Meter(self._spend, worst, self._price, self._settled)

    def sending(self) -> int:
        """A send begins (a request and its replays): returns the number of its first attempt."""
        self._before = self._state.usage.model_copy()
        self._noticed = TokenUsage()
        return self._start.attempts_before + self._made + 1

    def retried(self, notice: RetryNotice) -> None:
        """The send discarded an attempt and replays it (`request_with_replay`'s `on_retry`)."""
        self._noticed = self._noticed + notice.usage
        self._state.usage.add(notice.usage, attempts=1, discarded=1, cost_nanos=self.nanos(notice.usage))
        self._live.discarded(self.message_id, notice.attempt)
        self._discard(notice.usage, [self._event(_retry_event(notice, self.usage_dict(notice.usage)))])

    def text(self, attempt: int, text: str) -> None:
        """A piece of an attempt's text, streamed live (`request_with_replay`'s `on_text`)."""
        self._live.text(self.message_id, attempt, text)

    def reasoning(self, attempt: int, text: str) -> None:
        """A piece of an attempt's reasoning, streamed live (`request_with_replay`'s `on_reasoning`)."""
        self._live.reasoning(self.message_id, attempt, text)

    def cut(self, usage: TokenUsage) -> None:
        """A stop or drain cut an attempt the provider had started on: count it, journaled for the next execution."""
        self._state.usage.add(usage, attempts=1, discarded=1, cost_nanos=self.nanos(usage))
        self._discard(usage, [])

    def failed(self, failed: RequestFailed) -> None:
        """The send failed: the attempt that ended it was made (and billed) too, so count every attempt, once."""
        self._state.usage = self._before
        made, nanos = failed.attempts, self.nanos(failed.usage)
        self._state.usage.add(failed.usage, attempts=made, discarded=failed.discarded_attempts, cost_nanos=nanos)

    def compacted(self, failed: RequestFailed, cut: int) -> None:
        """The failed send was too long and is re-sent with old tool results elided before `cut`: journal the
        decision (a replay sends the same bytes) and the send's attempts not journaled yet, with their event."""
        self.may_compact = False
        self._made += failed.attempts
        attempt = self._start.attempts_before + self._made
        self._live.discarded(self.message_id, attempt)
        notice = {
            "message_id": self.message_id,
            "discarded": True,
            "attempt": attempt,
            "class": str(FailureClass.CONTEXT_OVERFLOW),
            "reason": f"{failed}; compacting: old tool results elided before message {cut}",
            "had_output": False,
            "delay": 0.0,
        }
        self._edge.record(self._compact_id, {"kind": "compact", "status": "decided", "elided_before": cut}, [])
        self._discard(failed.usage - self._noticed, [self._event(notice)])

    def answered(self, answer: Answer) -> TokenUsage:
        """The step's answer came: count its attempt; returns what every attempt of the step was billed."""
        self._live.ended(self.message_id)
        self._state.usage.add(answer.usage, attempts=1, discarded=0, cost_nanos=self.nanos(answer.usage))
        return self.spent.usage + answer.usage

    def reservations(self) -> list[str]:
        """Every budget reservation the step was settled under (earlier executions' included): for its record."""
        return [*self.spent.reservations, *self._settled[self._journaled :]]

    def _discard(self, usage: TokenUsage, events: list[EventDraft]) -> None:
        """Journal one more discarded attempt of this step (with its events) in one write."""
        self.spent = self.spent.plus(usage, self._settled[self._journaled :])
        self._journaled = len(self._settled)
        self._edge.record(self._spent_id, self.spent.record(), events)

    def _event(self, data: dict[str, Any]) -> EventDraft:
        """An event about a discarded attempt: `turn.retry` of a chat turn, `run.step` of a coding run."""
        return (self._kind, {**self._ids, **data})


def _retry_event(notice: RetryNotice, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "message_id": notice.message_id,
        "discarded": True,
        "attempt": notice.attempt,
        "class": str(notice.failure_class),
        "reason": notice.reason,
        "had_output": notice.had_output,
        "delay": round(notice.delay, 3),
        "usage": usage,  # what the discarded attempt was billed
    }
