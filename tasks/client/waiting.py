"""The sync client's `wait`: a turn or run's record read when its owner's settled signal names it, never polled.

On one Redis (or a Sentinel's master) the record's read goes in the same round trip as the blocking read of the
signal, pipelined behind it: Redis holds a blocked client's next command until its XREAD returns, and runs it
then, so the record comes back read just after the signal woke the caller (the settle's one script wrote both).
The caller's wake and its read were two round trips in a row at the end of every turn (bench/turn_trace.py).
On a Redis Cluster the same pipeline goes to the master of the owner's slot (both keys are on it), on that node's
own connection (`xread.slot_node`); a slot that moved meanwhile is followed by reading the two apart, the cluster
client's way.
"""

from __future__ import annotations

import time

import redis
from redis.cluster import RedisCluster

from tasks.client import core
from tasks.store import keys
from tasks.store.reads import load_record
from tasks.store.records import RunStatus, TurnResult, UnitRecord
from tasks.store.replies import read_entries, stream_entries
from tasks.store.xread import REROUTE, slot_node, xread


def wait_settled(
    client: redis.Redis, owner: str, unit: str, deadline: float, tail: str | None
) -> TurnResult | RunStatus:
    """Until `unit` ends or parks for an approval, or `deadline` (monotonic) passes: what `wait` returns.

    `tail`: the signal's last id when this client enqueued the unit, if it did. Every ending or park of the unit
    comes after it, so the record is read once the signal names the unit: a round trip less than reading the
    signal's tail and the record first, as a wait for a unit enqueued elsewhere does."""
    key = keys.settled(owner)
    read = tail is None  # whether `rec` holds the record as read (None then: there is no such unit)
    rec: UnitRecord | None = None
    if tail is not None:
        last_id = tail
    else:
        # One round trip; the signal's tail is read before the record, so no later ending or park is missed.
        pipe = client.pipeline(transaction=False)
        pipe.xrevrange(key, count=1)
        pipe.hgetall(keys.record(owner, unit))
        raw_tail, raw_rec = pipe.execute()
        tail_entries = stream_entries(raw_tail)
        last_id = tail_entries[0][0] if tail_entries else "0-0"
        rec = UnitRecord.from_hash(raw_rec)  # the record is the truth; the signal only says when to read it
    while True:
        timed_out = time.monotonic() >= deadline
        if not read and timed_out:
            rec, read = load_record(client, owner, unit), True
        if read:
            done = core.wait_over(rec, unit, timed_out=timed_out)
            if done is not None:
                return done
        block_ms = max(1, int(min(1.0, deadline - time.monotonic()) * 1000))
        try:
            pipe = (slot_node(client, key) or client).pipeline(transaction=False)
            pipe.xread({key: last_id}, block=block_ms, count=100)
            pipe.hgetall(keys.record(owner, unit))  # runs once the read returns: read after any ending it signals
            raw_entries, raw_rec = pipe.execute()
            entries = read_entries(raw_entries or [])
            rec, read = UnitRecord.from_hash(raw_rec), True
        except REROUTE:
            store: object = client  # typed as the plain client (tasks/store/connect.py); it may be the cluster's
            if not isinstance(store, RedisCluster):
                raise
            entries = read_entries(xread(client, {key: last_id}, block=block_ms, count=100) or [])
            if core.settled_news(entries, unit):
                rec, read = load_record(client, owner, unit), True
        if entries:
            last_id = entries[-1][0]
