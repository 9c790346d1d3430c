"""The budgets' marks: on a Redis Cluster, whether any budget may exist, readable on every unit's own slot.

Every model call's preflight asks whether a budget of its unit exists (tasks/store/ahead.py). Every budget is under
one hash tag, `{budgets}` (tasks/store/budgets.py), so on a cluster that question went to the budgets' master,
another master than the unit's for two units in three: a connection, a send and a read of their own, twice a turn
of one tool round, and the budgets' master woken by every model call of the fleet, budgets or none
(`bench.cluster`: ~0.2 ms of the pool child's CPU a turn, and its figure, bench/RESULTS.md stop 70).

So each shard has a mark (`keys.budgets_mark`), set on all of them before any budget is set, and never removed.
Absent on the unit's shard, no budget exists anywhere, nor any reservation held (one is only held on a budget), and
the read rides the unit's own round trip; present, the budget keys are asked as before. A budget cleared leaves
the marks: a store that has had a budget asks as it did.

A budget set without them, by a Baton from before the marks (a rolling upgrade, or budgets set before it), is seen
by the workers' sweeps: while the `{budgets}` flag that says every mark was set is missing, each pass counts the
keys in the budgets' slot, and sets the marks when it holds any. The first pass runs as a worker starts, before it
says it is ready; a budget an older client sets during the upgrade counts from the next pass (`BATON_LEASE_TTL`/4,
at most 2 s), as a budget set while an attempt is in flight counts from the next attempt. Once the flag is there,
each worker checks every minute that every mark still is (a failover can lose a write its replica had not yet
received, the mark's as any other's) and sets them again if one is not.

On one Redis (or behind Sentinel) there are no marks: the budget keys are asked in the unit's own round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from redis.crc import key_slot

from tasks.store import keys


def mark_all(client: Any) -> None:
    """Set every shard's mark, then the flag that says so (nothing on one Redis). Called before a budget is set: each
    mark's write is confirmed before the budget's starts, so once the budget exists every unit reads a mark."""
    pipe = _marking(client)
    if pipe is not None:
        pipe.execute()
        client.set(keys.BUDGETS_MARKED, "1")


async def mark_all_async(client: Any) -> None:
    """`mark_all` for an asyncio client."""
    pipe = _marking(client)
    if pipe is not None:
        await pipe.execute()
        await client.set(keys.BUDGETS_MARKED, "1")


def _marking(client: Any) -> Any:
    """A pipeline that sets every shard's mark, not yet sent (None on one Redis: no marks). One round trip per master:
    a cluster's pipeline groups its commands by node."""
    marks = keys.budgets_marks()
    if not marks:
        return None
    pipe = client.pipeline(transaction=False)
    for key in marks:
        pipe.set(key, "1")
    return pipe


def budgets_slot() -> int:
    return key_slot(keys.BUDGETS_MARKED.encode())


# How often a worker that has seen the flag checks that every mark is still there.
VERIFY_SECONDS = 60.0


def _kept(client: Any) -> bool:
    """Whether the budgets' slot keeps anything (a budget, or a reservation held on one)."""
    try:
        return int(client.cluster_countkeysinslot(budgets_slot())) > 0
    except redis.ResponseError:  # not allowed to count (an ACL without CLUSTER): as if a budget were kept, so the
        return True  # marks are set and the fleet asks the budget keys as before rather than miss one


def _all_present(client: Any) -> bool:
    pipe = client.pipeline(transaction=False)
    for key in keys.budgets_marks():
        pipe.exists(key)
    return all(int(found) for found in pipe.execute())


class Upkeep:
    """A worker's sweep's part in the marks (see the module). Until the flag is seen, each pass looks whether the
    budgets' slot keeps anything and marks every shard when it does (a budget an earlier Baton set). Once it is seen,
    every `VERIFY_SECONDS` it checks that each mark is still there and marks again when one is not: a failover that
    lost a mark's write, or a key deleted by hand, would otherwise leave that shard's units reading "no budget"."""

    def __init__(self, every: float = VERIFY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._every, self._clock = every, clock
        self._flagged = False
        self._next = 0.0

    def keep(self, client: Any) -> bool:
        """One pass; True when it set the marks (nothing on one Redis)."""
        if not keys.clustered():
            return False
        if not self._flagged:
            if not client.exists(keys.BUDGETS_MARKED):
                if not _kept(client):
                    return False
                mark_all(client)
                self._flagged, self._next = True, self._clock() + self._every
                return True
            self._flagged = True
        if self._clock() < self._next:
            return False
        self._next = self._clock() + self._every
        if _all_present(client):
            return False
        mark_all(client)
        return True
