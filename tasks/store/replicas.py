"""How many replicas a write tool's write-ahead entry waits for: those the master has online, at most the setting.

Confirming with a replica is what keeps a failover from losing the entry (and a replay from running the tool
twice). A master with no replica online has nothing a failover could promote over the write: waiting would
only refuse every write tool (as it did after each failover, until the old master came back as a replica), so
the write goes ahead and its outcome says it ran unreplicated. The decision is a function of the master's
`INFO replication` reply and `BATON_REDIS_MIN_REPLICAS`; the reading is cached briefly per process and client.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import redis

# How long a reading of the master's replicas is used: a few seconds. Replicas come and go on topology events
# (a replica lost, a promotion, a resync) that take seconds themselves (Sentinel's down-after, a full sync), so
# a fresher count would seldom differ, while reading it per write tool would add a round trip to each. A count
# that is stale either way is stated, never silent: one too high (a replica just left, or a new master) makes
# WAIT time out, the unit waits and retries with the count read anew (`forget`); one too low (a replica just
# came online) lets a write go ahead unconfirmed, and its outcome says it ran unreplicated.
REPLICA_COUNT_TTL = 3.0

_REPLICA_FIELD = re.compile(r"slave\d+")


def online_replicas(info: Mapping[str, Any]) -> int:
    """Replicas of the master that can acknowledge a write now, from its `INFO replication` reply.

    Only those in state `online`: a replica still syncing (`wait_bgsave`, `send_bulk`) is counted in
    `connected_slaves` but acknowledges nothing until it has loaded the master's data, so waiting for it would
    refuse writes for the length of a full sync. `connected_slaves` is the answer when no replica line parses.
    """
    lines = [value for key, value in info.items() if _REPLICA_FIELD.fullmatch(str(key)) and isinstance(value, dict)]
    if lines:
        return sum(1 for line in lines if line.get("state") == "online")
    try:
        return max(0, int(info.get("connected_slaves") or 0))
    except (TypeError, ValueError):
        return 0


def replicas_to_confirm(online: int, minimum: int) -> int:
    """How many replicas WAIT asks for: as many as the master has online, at most `BATON_REDIS_MIN_REPLICAS`.
    0: the write goes ahead unconfirmed (and is stated unreplicated)."""
    return max(0, min(online, minimum))


class ReplicaCounts:
    """The master's online replicas, per client, read at most once per `ttl` (see `REPLICA_COUNT_TTL`).

    No lock: an entry is replaced whole, so two threads that both find it stale read INFO twice, no worse. Keyed
    weakly by client, so a forked child (which builds its own clients) never reads its parent's entries.
    """

    def __init__(self, ttl: float = REPLICA_COUNT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._read: weakref.WeakKeyDictionary[redis.Redis, tuple[float, int]] = weakref.WeakKeyDictionary()

    def count(self, client: redis.Redis) -> int:
        found = self._read.get(client)
        if found is not None and self._clock() - found[0] < self._ttl:
            return found[1]
        return self.note(client, client.info("replication"))

    def note(self, client: redis.Redis, info: Mapping[str, Any]) -> int:
        """Keep a reading made for another purpose (an execution's start reads INFO replication anyway)."""
        online = online_replicas(info)
        self._read[client] = (self._clock(), online)
        return online

    def forget(self, client: redis.Redis) -> None:
        """Drop the reading: a WAIT that was not confirmed may have asked a master that has fewer replicas now."""
        self._read.pop(client, None)


REPLICAS = ReplicaCounts()
