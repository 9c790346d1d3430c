"""Reading the indexes that span units (`keys.INDEXES`) across all their shards, as the sweeps do.

On a Redis Cluster an index is `keys.SHARDS` sorted sets spread over the masters; one pipeline asks every shard
(redis-py's cluster pipeline sends each master its shards' reads at once). On a plain Redis it is the one key,
read in the same single round trip as before.
"""

from __future__ import annotations

import redis

from tasks.store import keys
from tasks.store.replies import score_text, text


def due(
    client: redis.Redis, name: str, until: float, *, limit: int | None = None
) -> list[tuple[str, str, str]]:
    """Every entry of index `name` (a sorted set) scored up to `until`, at most `limit` per shard, as
    (the shard's key, member, score as Redis wrote it: compare it back exactly, never through a float)."""
    shard_keys = keys.shards(name)
    pipe = client.pipeline(transaction=False)
    for key in shard_keys:
        pipe.zrangebyscore(
            key, "-inf", until, start=0 if limit else None, num=limit, withscores=True, score_cast_func=score_text
        )
    return [
        (key, text(member), str(score))
        for key, reply in zip(shard_keys, pipe.execute(), strict=True)
        for member, score in reply
    ]


def count(client: redis.Redis, name: str) -> int:
    """How many entries index `name` (a sorted set) holds over all its shards."""
    pipe = client.pipeline(transaction=False)
    for key in keys.shards(name):
        pipe.zcard(key)
    return sum(int(n) for n in pipe.execute())
