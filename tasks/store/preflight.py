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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.commands.core import Script

from tasks.store.fenced import scripts_in_one_trip


@dataclass(eq=False)
class Deferred:
    """A script call that waits for the next admission on its thread; `answer` reads its reply (and may raise)."""

    script: Script
    keys: list[str]
    args: list[Any]
    answer: Callable[[Any], None]


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
        waiting = self._waiting()
        calls, self._local.waiting = list(waiting), []
        replies = scripts_in_one_trip(client, [*((c.script, c.keys, c.args) for c in calls), (script, keys, args)])
        refused: Exception | None = None
        for call, reply in zip(calls, replies, strict=False):
            try:
                call.answer(reply)  # every one read, so none that held is forgotten
            except Exception as err:
                refused = refused or err
        if refused is not None:
            raise refused
        return replies[-1]


PREFLIGHT = Preflight()
