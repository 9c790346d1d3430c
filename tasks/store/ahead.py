"""A model call's preflight asked for ahead of it: the first in its unit's take's round trip, a later one at the end of
the round of read tools before it (`round_ahead`): the gate's admission and whether any budget applies.

Every model call has a preflight before it is sent (tasks/store/preflight.py): the budgets' reservation and the rate
gate's admission. For the first call of a unit's first start, what both need is known before the take: the endpoint
and model the unit starts with (the fleet's default agent's), and the unit's budget scopes, once its message says
whose it is (the `baton_user` header its publisher adds: an older publisher's message says nothing, and its first
call asks on its own). So the take's round trip carries them, each on its own slot: the admission, as the gate would
ask it, and `EXISTS` of the unit's budget keys and its owner's held reservations, as the reservation's script would
read them first (on a Redis Cluster, whose budgets are on another master, the budgets' mark on the unit's own slot
instead, while the marks say no budget exists: tasks/store/budget_marks.py). The first reservation and admission
then take those replies (`Preflight.no_budget`, `admitted`), if they are for the same keys and were asked within
`AHEAD_SECONDS`: one round trip fewer a turn. Where a budget exists, the reservation asks as before, with an
admission of its own.

What this changes: the first attempt is admitted a millisecond earlier, at the take, and a budget set in that
millisecond starts counting with the unit's next attempt (as one set while an attempt is in flight does). An agent
with rate limits of its own is admitted with its request's weights, known only once the request is planned: it asks
as before. An admission asked for and not used (the unit did not start, or started as another agent or model)
counted one request in the endpoint's shared count: the fleet sends a little less, never more.

A later call's preflight is asked at the end of the round of tools before it (`round_ahead`), with the round's read
results where they wait for it (its lead): the round trip overlaps the planning of the request, and the call reads
the replies before it is sent. A budget set in that millisecond counts from the unit's next attempt, as above.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from tasks.store.direct import Call, InFlight, SentAhead, in_one_trip, raised
from tasks.store.preflight import PREFLIGHT, Asked

ScriptCall = tuple[Script, list[str], list[Any]]
# The task message's header that says whose unit it is ("": nobody's), added by every publisher with the record at
# hand; its absence (an older publisher's message) only means the first call asks on its own.
USER_HEADER = "baton_user"


@dataclass(frozen=True)
class Ask:
    """What the take asks for the first model call: the gate's admission (its endpoint state key and script call;
    None: no gate, or an agent with limits of its own), the budget keys whose existence answers the reservation, and
    on a cluster the budgets' mark on the unit's own slot ("": none), which answers it when absent
    (tasks/store/budget_marks.py)."""

    admission: tuple[str, Script, list[str], list[Any]] | None
    budget_keys: list[str]
    mark: str = ""


# Whether the last budgets' mark this process read was there (it starts as if it were). While it is, the budget
# keys are asked beside the mark, in the same round trip, so a fleet with budgets pays what it did; while it is
# not, only the mark is, on the unit's own master, and a mark found after all leaves the reservation to ask.
_MARK_SEEN = [True]


def take_asking(client: redis.Redis, take: ScriptCall, ask: Ask, behind: Call) -> tuple[Any, Any]:
    """Run the take's script, `behind` (the call that follows it on its slot) and `ask`'s reads in one round trip;
    the take's reply (an error of it raised) and `behind`'s (an error as a value). What the reads answered is left
    on this thread for the first model call; a read that failed is asked again by it."""
    script, keys, args = take
    at = time.monotonic()
    # a server that lost its scripts: each runs again, loading it
    reads, asked = _reads(client, ask)
    replies = in_one_trip(client, [Call.script(client, script, keys, args), behind, *reads])
    taken = raised(replies[0])
    PREFLIGHT.asked(_answered(ask, asked, replies[2:], at))
    return taken, replies[1]


def round_ahead(client: redis.Redis, ask: Ask) -> None:
    """At the end of a round of tools: send what the next model call's preflight asks (`ask`: the gate's admission,
    and whether a budget of the unit exists), with the round's read results if they wait for that preflight (its
    lead, held on the unit's fence), and leave the replies for the preflight to read (`Preflight.flying`). The round
    trip then overlaps the planning of the call's request instead of coming after it (or, with nothing to write, is
    not the call's own any more); the call is still sent only once the preflight has read it all: the write
    confirmed (a lost lease raises there, as before), the stop and drain flags it read acted on, the admission and the
    budgets' absence taken as the take's are. Nothing is asked while a reservation waits, or once a budget of the
    unit was seen: its reservation needs a round trip of its own anyway. The fence's next write, if it comes first (a
    park, the settle), reads the write's reply itself."""
    if not PREFLIGHT.may_ask_ahead():
        return
    lead = PREFLIGHT.take_lead()
    calls, asked = _reads(client, ask)
    at = time.monotonic()
    if lead is None:  # the results are written (a write tool's, or no preflight waits for them): only the asks
        sent = InFlight.send(client, calls)
    else:
        with lead.sending() as first:
            if first is None:  # its batch rode a commit already: the call asks as it would have
                return
            calls.insert(0, Call.script(client, *first))
            at = time.monotonic()
            sent = InFlight.send(client, calls)
            if sent is not None:
                lead.sent_ahead(SentAhead(sent))

    def land(replies: list[Any]) -> None:
        if lead is not None:
            lead.answer(raised(replies[0]))
            replies = replies[1:]
        PREFLIGHT.asked(_answered(ask, asked, replies, at))

    if sent is not None:
        PREFLIGHT.flying(lambda: land(sent.replies()))
    elif lead is not None:  # a client that holds one connection: the write goes now, the asks with it
        land(in_one_trip(client, calls))
    # else (only asks, on such a client) the call asks as it would have


@dataclass(frozen=True)
class _Shape:
    """Which of an `Ask`'s reads were sent, in this order: the admission, the mark, the budget keys' EXISTS."""

    admission: bool
    mark: bool
    budgets: bool


def _reads(client: redis.Redis, ask: Ask) -> tuple[list[Call], _Shape]:
    """`ask`'s calls: the gate's admission, if asked, then the budgets' mark on a cluster, then the budget keys'
    `EXISTS` unless the last mark read was absent (`_MARK_SEEN`)."""
    calls = []
    if ask.admission is not None:
        _, admit, admit_keys, admit_args = ask.admission
        calls.append(Call.script(client, admit, admit_keys, admit_args))
    mark = ask.mark
    if mark:
        calls.append(Call(("EXISTS", mark), mark, lambda: client.exists(mark)))
    budget_keys = ask.budget_keys
    budgets = not mark or _MARK_SEEN[0]
    if budgets:
        calls.append(Call(("EXISTS", *budget_keys), budget_keys[0], lambda: client.exists(*budget_keys)))
    return calls, _Shape(ask.admission is not None, bool(mark), budgets)


def no_budget(mark: Any, exists: Any) -> bool | None:
    """Whether no budget of the unit exists, from the replies of the mark's `EXISTS` and the budget keys' (None: not
    asked; an exception: an error reply): the keys' own answer when there is one, else an absent mark's; None when
    neither says (the reservation asks)."""
    if isinstance(exists, int):
        return exists == 0
    if isinstance(mark, int) and mark == 0:
        return True
    return None


def _answered(ask: Ask, shape: _Shape, replies: list[Any], at: float) -> Asked:
    """What `ask`'s calls, sent at `at` (monotonic) as `shape` says, answered: an error reply is asked again by the
    call."""
    replies = list(replies)
    admission = replies.pop(0) if shape.admission else None
    mark = replies.pop(0) if shape.mark else None
    exists = replies.pop(0) if shape.budgets else None
    if isinstance(mark, int):
        _MARK_SEEN[0] = mark != 0
    return Asked(
        ask.admission[0] if ask.admission is not None else "",
        None if isinstance(admission, Exception) else admission,
        tuple(ask.budget_keys),
        no_budget(mark, exists),
        at,
    )
