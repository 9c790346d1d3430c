"""Noticing that the store failed over under an execution, so its outcome can say so instead of staying silent.

Redis replicates asynchronously: a promotion loses whatever the old master had acknowledged but not yet sent.
Baton confirms only a write tool's write-ahead entry with a replica (the journal's WAIT), so the rest of what a
failover can lose is safe to lose (a journaled provider step is redone, and billed again; a lease renewal or an
event may vanish) but was silent. A promoted replica starts a new replication history, so the master's
`master_replid` changes: an execution reads it when it starts (in the take's script) and its settle's write checks
it again (in the fenced write's script, which writes nothing when it changed), so the execution knows whether a
failover fell in between, and its outcome states what that may have cost.
"""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool

FAILOVER_NOTICE = (
    "The store (Redis) failed over while this ran: writes it had not yet replicated may have been lost. A lost"
    " step was redone (and billed again); a write tool never ran twice."
)


def behind_sentinel(client: redis.Redis) -> bool:
    """Whether the store is reached through Sentinel, the topology that can fail over under a unit."""
    return isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool)  # a cluster has none


def master_of(client: redis.Redis, key: str) -> redis.Redis | None:
    """The client through which a write of `key` is confirmed by replicas (WAIT counts the writes of its own
    connection) and its master's replication history read, where the store can fail over: the client itself
    behind Sentinel; on a cluster, the client of the master that holds `key`'s slot now (each master has its own
    replicas and its own failovers). None on one plain Redis, which has nothing to fail over to."""
    store: object = client  # typed as the plain client (tasks/store/connect.py); here it may be the cluster's
    if isinstance(store, RedisCluster):
        node: redis.Redis = store.get_node_from_key(key).redis_connection
        return node
    return client if behind_sentinel(client) else None


def replid(info: object) -> str | None:
    """The replication id in an `INFO replication` reply, or None when it does not say."""
    value = info.get("master_replid") if isinstance(info, dict) else None
    return str(value) if value else None
