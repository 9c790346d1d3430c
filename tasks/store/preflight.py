"""An attempt's two asks of the store before it is sent, its budgets' reservation and the fleet's rate gate, in one
round trip.

Both are scripts, on slots of their own (`{budgets}`, the endpoint's `{rate:...}`), asked one right after the
other: the loop reserves the attempt's worst case (agent/loop/spend.py) and the provider's gate admits it
(agent/provider/rate_gate.py) with nothing sent between. Sent apart they were two round trips an attempt, four a
turn of one tool round (bench/turn_trace.py). So where a gate will ask, the reservation waits here, on the
calling thread, and goes in the gate's round trip, ahead of its admission: its reply is read first, and a
refusal raises `BudgetExceeded` there, before anything is sent, as it did in the reservation's own round trip.

A reservation withdrawn unsent (the attempt was stopped before its gate asked) was never held: nothing to settle.
A refusal whose admission was admitted leaves that admission counted in the window (the gate gives back its
output tokens): the fleet sends a little less, never more.

A write may lead the round trip (`lead`): a read tool's result, held on its unit's fence, which would otherwise be
a fenced write of its own between the round of tools and the next model call (tasks/store/journal.py). It goes
first, its reply is read first, and a lost lease raises (`LeaseLostUnsent`) before any other refusal; what it read
(the stop and drain flags) is acted on before the attempt is sent. A lead whose write rode a commit first sends
nothing.

A unit's first model call may have been asked for already, in the take's round trip (`Asked`, tasks/store/ahead.py):
the gate's admission of the endpoint and model the unit starts with, and whether any budget of the unit exists. The
first reservation and admission on the thread then take those replies (`no_budget`, `admitted`) instead of a round
trip of their own, if they ask for the same keys within `AHEAD_SECONDS` of the take; otherwise they ask as before.
So may every later call's, asked at the end of the round of read tools before it with that round's lead (`flying`):
the round trip then overlaps the planning of the call's request, and the preflight reads what came back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from redis.commands.core import Script

from tasks.store.direct import SentAhead
from tasks.store.scripts import scripts_in_one_trip


@dataclass(eq=False)
class Deferred:
    """A script call that waits for the next admission on its thread; `answer` reads its reply (and may raise)."""

    script: Script
    keys: list[str]
    args: list[Any]
    answer: Callable[[Any], None]


# How long what the take asked for the first model call stands for it: a chat turn's first call follows its take by
# a millisecond; a run that first starts its tool servers asks again, so a budget set meanwhile counts for it.
AHEAD_SECONDS = 0.5


@dataclass(frozen=True)
class Asked:
    """What the take's round trip asked for the unit's first model call (see the module): the gate's reply for its
    endpoint state key (None: not asked), and whether none of the budget keys exists (None: not read)."""

    state_key: str
    admission: Any
    budget_keys: tuple[str, ...]
    no_budget: bool | None
    at: float


class Lead(Protocol):
    """A write that goes first in the next round trip (see the module)."""

    def sending(self) -> AbstractContextManager[tuple[Script, list[str], list[Any]] | None]:
        """The script call to send, held while it is sent (None: nothing to send any more)."""

    def answer(self, reply: Any) -> None:
        """Act on its reply (may raise)."""

    def sent_ahead(self, sent: SentAhead) -> None:
        """Inside `sending`: the call went out without waiting for its reply (`sent`), read by the next preflight or
        by its own store's next write, whichever comes first."""


class Preflight:
    """The calls waiting on each thread (a unit's attempts run on one thread: a prefork child's, a threads pool's
    or a greenlet, whose `threading.local` gevent makes its own)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _waiting(self) -> list[Deferred]:
        waiting: list[Deferred] | None = getattr(self._local, "waiting", None)
        if waiting is None:
            waiting = self._local.waiting = []
        return waiting

    def defer(self, call: Deferred) -> None:
        self._waiting().append(call)

    def lead(self, write: Lead) -> None:
        """`write` goes first in this thread's next round trip. One at a time: a later lead replaces it, and its write
        carries every batch its fence still holds (a round's earlier results too)."""
        self._land()
        self._local.lead = write

    def forget(self) -> None:
        """Drop what waits on this thread, at the end of an execution: nothing of it may ride the next one's. (A lead
        in flight is its fence's to drop: `Fence.drop_ahead`.)"""
        self._local.waiting, self._local.lead, self._local.asked = [], None, None
        self._local.flight, self._local.budgeted = None, False

    def asked(self, asked: Asked) -> None:
        """What the take, or a round's end, asked for this thread's next model call (see the module)."""
        self._local.asked = asked
        if asked.no_budget is False:
            self._local.budgeted = True

    def may_ask_ahead(self) -> bool:
        """Whether a round's end may ask for the next model call (`flying`): not while a reservation waits, nor once a
        budget of the unit was seen, whose reservation needs a round trip anyway, with an admission of its own."""
        self._land()
        return not self._waiting() and not getattr(self._local, "budgeted", False)

    def take_lead(self) -> Lead | None:
        """The lead, taken for a round's end to send with its asks (`flying`)."""
        lead: Lead | None = getattr(self._local, "lead", None)
        self._local.lead = None
        return lead

    def flying(self, land: Callable[[], None]) -> None:
        """What a round's end sent for this thread's next model call, in flight: `land` reads its replies and acts on
        them (the lead's answer, then `asked`), at the next preflight, before anything else of it."""
        self._local.flight = land

    def _land(self) -> None:
        land: Callable[[], None] | None = getattr(self._local, "flight", None)
        if land is not None:
            self._local.flight = None
            land()

    def _fresh(self) -> Asked | None:
        asked: Asked | None = getattr(self._local, "asked", None)
        if asked is not None and time.monotonic() - asked.at > AHEAD_SECONDS:
            self._local.asked = asked = None
        return asked

    def no_budget(self, budget_keys: list[str]) -> bool:
        """True when the take read that none of `budget_keys` exists. Only the first reservation after the take asks:
        its answer is spent either way."""
        self._land()
        asked = self._fresh()
        if asked is None or asked.no_budget is None:
            return False
        self._local.asked = Asked(asked.state_key, asked.admission, (), None, asked.at)
        return asked.no_budget and asked.budget_keys == tuple(budget_keys)

    def admitted(self, state_key: str) -> Any:
        """The gate's reply the take had for `state_key`, or None: ask. Only the first admission after the take asks
        (its reply is spent either way), and not while a reservation or a lead waits on this thread: they need the round
        trip anyway, and the admission it carries counts the attempt once more (the fleet sends a little less)."""
        self._land()
        asked = self._fresh()
        self._local.asked = None
        if asked is None or asked.admission is None or asked.state_key != state_key:
            return None
        if self._waiting() or getattr(self._local, "lead", None) is not None:
            return None
        return asked.admission

    def withdraw(self, call: Deferred) -> bool:
        """Take `call` back unsent (True), or say it was sent (False)."""
        waiting = self._waiting()
        if call in waiting:
            waiting.remove(call)
            return True
        return False

    def run(self, client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run `script` with every call waiting on this thread ahead of it, in one round trip; the waiting calls'
        replies are answered first (a refusal raises before `script`'s reply is returned)."""
        self._land()
        waiting = self._waiting()
        calls, self._local.waiting = list(waiting), []
        lead: Lead | None = getattr(self._local, "lead", None)
        self._local.lead = None
        answers = [call.answer for call in calls]
        with lead.sending() if lead is not None else nullcontext(None) as first:
            sent = [(c.script, c.keys, c.args) for c in calls]
            if first is not None and lead is not None:
                sent.insert(0, first)
                answers.insert(0, lead.answer)
            replies = scripts_in_one_trip(client, [*sent, (script, keys, args)])
        refused: Exception | None = None
        for answer, reply in zip(answers, replies, strict=False):
            try:
                answer(reply)  # every one read, so none that held is forgotten
            except Exception as err:
                refused = refused or err
        if refused is not None:
            raise refused
        return replies[-1]


PREFLIGHT = Preflight()
