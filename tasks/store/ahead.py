"""A unit's first model call asked for in its take's round trip: the gate's admission and whether any budget applies.

Every model call has a preflight before it is sent (tasks/store/preflight.py): the budgets' reservation and the rate
gate's admission. For the first call of a unit's first start, what both need is known before the take: the endpoint
and model the unit starts with (the fleet's default agent's), and the unit's budget scopes, once its message says
whose it is (the `baton_user` header its publisher adds: an older publisher's message says nothing, and its first
call asks on its own). So the take's round trip carries them, each on its own slot: the admission, as the gate would
ask it, and `EXISTS` of the unit's budget keys and its owner's held reservations, as the reservation's script would
read them first. The first reservation and admission then take those replies (`Preflight.no_budget`, `admitted`),
if they are for the same keys and were asked within `AHEAD_SECONDS`: one round trip fewer a turn. Where a budget
exists, the reservation asks as before, with an admission of its own.

What this changes: the first attempt is admitted a millisecond earlier, at the take, and a budget set in that
millisecond starts counting with the unit's next attempt (as one set while an attempt is in flight does). An agent
with rate limits of its own is admitted with its request's weights, known only once the request is planned: it asks
as before. An admission asked for and not used (the unit did not start, or started as another agent or model)
counted one request in the endpoint's shared count: the fleet sends a little less, never more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from tasks.store.direct import Call, in_one_trip, raised
from tasks.store.preflight import PREFLIGHT, Asked

ScriptCall = tuple[Script, list[str], list[Any]]
# The task message's header that says whose unit it is ("": nobody's), added by every publisher with the record at
# hand; its absence (an older publisher's message) only means the first call asks on its own.
USER_HEADER = "baton_user"


@dataclass(frozen=True)
class Ask:
    """What the take asks for the first model call: the gate's admission (its endpoint state key and script call;
    None: no gate, or an agent with limits of its own) and the budget keys whose existence answers the reservation."""

    admission: tuple[str, Script, list[str], list[Any]] | None
    budget_keys: list[str]


def take_asking(client: redis.Redis, take: ScriptCall, ask: Ask, behind: Call) -> tuple[Any, Any]:
    """Run the take's script, `behind` (the call that follows it on its slot) and `ask`'s reads in one round trip;
    the take's reply (an error of it raised) and `behind`'s (an error as a value). What the reads answered is left
    on this thread for the first model call; a read that failed is asked again by it."""
    script, keys, args = take
    calls = [Call.script(client, script, keys, args), behind]
    if ask.admission is not None:
        _, admit, admit_keys, admit_args = ask.admission
        calls.append(Call.script(client, admit, admit_keys, admit_args))
    budget_keys = ask.budget_keys
    calls.append(Call(("EXISTS", *budget_keys), budget_keys[0], lambda: client.exists(*budget_keys)))
    at = time.monotonic()
    replies = in_one_trip(client, calls)  # a server that lost its scripts: each runs again, loading it
    taken = raised(replies[0])
    admission = replies[2] if ask.admission is not None else None
    exists = replies[-1]
    PREFLIGHT.asked(
        Asked(
            ask.admission[0] if ask.admission is not None else "",
            None if isinstance(admission, Exception) else admission,
            tuple(ask.budget_keys),
            None if isinstance(exists, Exception) else int(exists) == 0,
            at,
        )
    )
    return taken, replies[1]
