"""XREAD on either store, sent straight to the node of its streams on a Redis Cluster.

redis-py's cluster client learns the keys of a command whose keys can move (XREAD's follow STREAMS) by asking a
node, COMMAND GETKEYS, before every such command: two extra round trips per read (bench/cluster.py counted them
on every `wait`). The streams of one XREAD share one slot, so its node is known from the first key. A read sent
that way is not retried by redis-py, so one that finds the slot moved or its node gone is sent again the usual
way, which follows the cluster (MOVED, ASK, a new master).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

# What sends a read again the usual way: the slot moved (MOVED, ASK), its node is gone, or the client has not
# learnt the slots yet (an asyncio cluster client does on its first command).
REROUTE = (
    redis.exceptions.MovedError, redis.exceptions.AskError, redis.ConnectionError, redis.TimeoutError,
    redis.exceptions.SlotNotCoveredError,
)


def _args(streams: dict[str, str], block: int | None, count: int | None) -> list[Any]:
    args: list[Any] = ["XREAD"]
    if count is not None:
        args += ["COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    return [*args, "STREAMS", *streams.keys(), *streams.values()]


def slot_node(client: redis.Redis, key: str) -> redis.Redis | None:
    """On a cluster, the plain client of the master that holds `key`'s slot (as redis-py knows it now): commands of
    one slot pipelined there are one round trip, where the cluster client would ask its node per command (an XREAD's
    keys first, COMMAND GETKEYS). None on one Redis. A reply that says the slot moved (MOVED, ASK: `REROUTE`) means
    the caller sends them again the usual way."""
    store: object = client  # typed as the plain client (tasks/store/connect.py); here it may be the cluster's
    if not isinstance(store, RedisCluster):
        return None
    node: redis.Redis = store.get_node_from_key(key).redis_connection
    return node


def xread(client: redis.Redis, streams: dict[str, str], *, block: int | None = None, count: int | None = None) -> Any:
    """`client.xread(streams, count=count, block=block)`."""
    store: object = client  # typed as the plain client (tasks/store/connect.py); here it may be the cluster's
    if isinstance(store, RedisCluster):
        try:
            node = store.get_node_from_key(next(iter(streams)))
            return store.execute_command(*_args(streams, block, count), target_nodes=node)
        except REROUTE:
            pass
    return client.xread(streams, count=count, block=block)  # type: ignore[arg-type]


async def axread(
    client: aioredis.Redis, streams: dict[str, str], *, block: int | None = None, count: int | None = None
) -> Any:
    """`await client.xread(streams, count=count, block=block)`."""
    store: object = client
    if isinstance(store, AsyncRedisCluster):
        try:
            node = store.get_node_from_key(next(iter(streams)))
            return await store.execute_command(*_args(streams, block, count), target_nodes=node)
        except REROUTE:
            pass
    return await client.xread(streams, count=count, block=block)  # type: ignore[arg-type]
