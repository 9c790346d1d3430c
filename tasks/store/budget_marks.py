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
at most 2 s), as a budget set while an attempt is in flight counts from the next attempt.

On one Redis (or behind Sentinel) there are no marks: the budget keys are asked in the unit's own round trip.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.crc import key_slot

from tasks.store import keys


def mark_all(client: Any) -> None:
    """Set every shard's mark, then the flag that says so (nothing on one Redis). Before a budget is set: a unit that
    reads no mark after that budget exists cannot be (each mark's write is confirmed before the budget's starts)."""
    marks = keys.budgets_marks()
    if not marks:
        return
    pipe = client.pipeline(transaction=False)  # one round trip per master: a cluster's pipeline groups by node
    for key in marks:
        pipe.set(key, "1")
    pipe.execute()
    client.set(keys.BUDGETS_MARKED, "1")


async def mark_all_async(client: Any) -> None:
    """`mark_all` for an asyncio client."""
    marks = keys.budgets_marks()
    if not marks:
        return
    pipe = client.pipeline(transaction=False)
    for key in marks:
        pipe.set(key, "1")
    await pipe.execute()
    await client.set(keys.BUDGETS_MARKED, "1")


def budgets_slot() -> int:
    return key_slot(keys.BUDGETS_MARKED.encode())


def mark_if_kept(client: Any) -> bool | None:
    """The sweep's pass (see the module): True when it set the marks for what the budgets' slot keeps, False when
    the slot keeps nothing yet, None when the marks were set already (nothing to look at again: the flag stays)."""
    if not keys.clustered() or client.exists(keys.BUDGETS_MARKED):
        return None
    try:
        kept = int(client.cluster_countkeysinslot(budgets_slot()))
    except redis.ResponseError:  # not allowed to count (an ACL without CLUSTER): marked, as if a budget were kept,
        kept = 1  # so the fleet asks the budget keys as before rather than miss one
    if not kept:
        return False
    mark_all(client)
    return True
