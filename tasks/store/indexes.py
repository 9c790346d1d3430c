"""Reading the indexes that span units (`keys.INDEXES`) across all their shards, as the sweeps do.

On a Redis Cluster an index is `keys.SHARDS` sorted sets spread over the masters; one round trip asks every shard,
each master its shards' reads pipelined on one connection held from its pool (tasks/store/direct.py), rather than
through redis-py's cluster pipeline, which routes every command again in Python: a sweep pass of four indexes cost
a worker ~5 ms of CPU on a cluster against ~0.5 on one Redis (bench/cluster.py), every two seconds, in the
worker's main process beside its consumer. On a plain Redis an index is the one key, read in one round trip.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import redis

from tasks.store import keys
from tasks.store.direct import Call, in_one_trip, raised
from tasks.store.replies import score_text, text


def due(
    client: redis.Redis, name: str, until: float, *, limit: int | None = None
) -> list[tuple[str, str, str]]:
    """Every entry of index `name` (a sorted set) scored up to `until`, at most `limit` per shard, as
    (the shard's key, member, score as text that reads back as the same number: compare it with `tonumber`)."""
    shard_keys = keys.shards(name)
    window: tuple[Any, ...] = ("LIMIT", 0, limit) if limit else ()
    replies = _each(client, shard_keys, lambda key: ("ZRANGEBYSCORE", key, "-inf", until, "WITHSCORES", *window))
    return [(key, text(member), score_text(score)) for key, reply in zip(shard_keys, replies, strict=True)
            for member, score in _pairs(reply)]


def count(client: redis.Redis, name: str) -> int:
    """How many entries index `name` (a sorted set) holds over all its shards."""
    return sum(int(n) for n in _each(client, keys.shards(name), lambda key: ("ZCARD", key)))


def _each(client: redis.Redis, shard_keys: list[str], command: Any) -> list[Any]:
    """`command(key)` on every shard in one round trip, each master's straight on a held connection (a call that did
    not run where it was sent, or whose connection broke, runs again through the client); the replies as the
    server sent them, in order, an error reply raised."""
    calls = [Call(cmd, key, partial(client.execute_command, *cmd)) for key in shard_keys for cmd in [command(key)]]
    return [raised(reply) for reply in in_one_trip(client, calls)]


def _pairs(reply: list[Any]) -> list[tuple[Any, Any]]:
    """A WITHSCORES reply unparsed: [member, score] pairs (RESP3, redis-py 8's default) or member, score, … (RESP2)."""
    if reply and isinstance(reply[0], list):
        return [(member, score) for member, score in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))

