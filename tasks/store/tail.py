"""Reading an owner's events stream from a point on: the one reader behind the SSE stream and `AsyncClient.stream`.

The backlog comes by XRANGE, page by page, then live entries by XREAD BLOCK. Resumption is exclusive: a reader
that has seen id X gets the entries after X, nothing repeated, nothing skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from tasks.store.xread import axread

START = "0-0"
BATCH = 500  # entries per XRANGE/XREAD call
BLOCK_MS = 60_000  # one XREAD BLOCK; a disconnect cancels it sooner, and fewer re-issues cost less CPU when idle


def entries_of(reply: Any) -> list[tuple[str, bytes]]:
    """(stream id, field `e`) of XRANGE entries, or of the one stream of an XREAD reply, as redis-py gives them."""
    out = []
    for stream_id, fields in reply or []:
        ident = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
        out.append((ident, (fields or {}).get(b"e", b"")))
    return out


async def tail(
    store: aioredis.Redis, key: str, after: str = START, *, block_ms: int = BLOCK_MS
) -> AsyncIterator[tuple[str, bytes]]:
    """(stream id, raw entry) of `key` after `after`, the backlog first, then live ones as they come, forever.

    Store errors go up to the caller (the SSE stream says so and ends; a client reconnects after the last id).
    """
    last = after
    while True:
        backlog = entries_of(await store.xrange(key, f"({last}", "+", count=BATCH))
        for last, raw in backlog:  # binds `last`: where the next read starts
            yield last, raw
        if len(backlog) < BATCH:
            break
    while True:
        found: Any = await axread(store, {key: last}, block=block_ms, count=BATCH)
        for last, raw in entries_of(found[0][1] if found else None):  # binds `last` likewise
            yield last, raw
