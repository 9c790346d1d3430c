"""The live stream: a chat's or run's Redis events stream relayed as Server-Sent Events.

Every entry (field `e`, a JSON object) becomes one SSE message: `id:` the Redis stream id, `event:` the
object's `type`, `data:` the object with `"id"` added. Whatever types the stream holds are relayed
(text.delta included); nothing is decided here. Resumption is exclusive: a client that says it has seen
id X gets the entries after X, nothing repeated, nothing skipped.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import HTTPException, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from tasks.store import keys

log = logging.getLogger("baton.web.stream")

STREAM_ID = re.compile(r"^(\d{1,20})-(\d{1,20})$")
START = "0-0"
BATCH = 500  # entries per XRANGE/XREAD call
BLOCK_MS = 60_000  # one XREAD BLOCK; a disconnect cancels it sooner, and fewer re-issues cost less CPU when idle
RECONNECT_MS = 1000  # the `retry:` hint: how soon an EventSource reconnects after the stream ends
SEND_TIMEOUT = 30.0  # a client that stops reading for this long is dropped
NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def parse_stream_id(raw: str) -> str:
    """A Redis stream id `MS-SEQ` (each part a 64-bit unsigned integer); ValueError otherwise."""
    found = STREAM_ID.fullmatch(raw)
    if not found or any(int(part) >= 2**64 for part in found.groups()):
        raise ValueError(f"not a stream id (MS-SEQ, e.g. 1700000000000-0): {raw[:40]!r}")
    return raw


def resume_from(last_event_id: str | None, after: str | None) -> str:
    """Where a stream starts, exclusive. `Last-Event-ID` wins over `?after=`: an EventSource sends the
    header when it reconnects by itself, and then it is newer than the URL it was first opened with."""
    for raw in (last_event_id, after):
        if raw is not None and raw.strip() != "":
            return parse_stream_id(raw.strip())
    return START


def to_message(stream_id: str, raw: bytes | str) -> ServerSentEvent | None:
    """One stream entry as an SSE message; None for an entry that is not a JSON object with a type."""
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        log.warning("skipping unreadable stream entry %s", stream_id)
        return None
    body["id"] = stream_id
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=data, event=body["type"], id=stream_id)


def entries_of(reply: Any) -> list[tuple[str, bytes]]:
    """(stream id, field `e`) of XRANGE entries, or of the one stream of an XREAD reply, as redis-py gives them."""
    out = []
    for stream_id, fields in reply or []:
        ident = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
        out.append((ident, (fields or {}).get(b"e", b"")))
    return out


async def relay(store: aioredis.Redis, key: str, after: str) -> AsyncIterator[ServerSentEvent]:
    """The entries of `key` after `after`: the backlog by XRANGE, then live ones by XREAD BLOCK.

    Runs until the client goes away (sse-starlette cancels it on a disconnect, which also abandons the
    blocked XREAD and closes its connection) or Redis fails (the stream ends; the client reconnects with
    its Last-Event-ID and loses nothing).
    """
    last = after
    yield ServerSentEvent(comment="open", retry=RECONNECT_MS)
    try:
        while True:
            backlog = entries_of(await store.xrange(key, f"({last}", "+", count=BATCH))
            for last, raw in backlog:  # binds `last`: where the next read starts
                message = to_message(last, raw)
                if message is not None:
                    yield message
            if len(backlog) < BATCH:
                break
        while True:
            found: Any = await store.xread({key: last}, block=BLOCK_MS, count=BATCH)
            for last, raw in entries_of(found[0][1] if found else None):  # binds `last` likewise
                message = to_message(last, raw)
                if message is not None:
                    yield message
    except (redis.ConnectionError, redis.TimeoutError) as err:
        log.warning("stream %s ended: store unavailable (%s)", key, type(err).__name__)
        # Said, not just done: a raw client sees why the stream closed; a browser reconnects after RECONNECT_MS
        # with its Last-Event-ID (a 503 instead would make an EventSource give up for good).
        yield ServerSentEvent(comment="the store (Redis) is unavailable; reconnect with Last-Event-ID")


def stream_response(request: Request, owner_id: str) -> EventSourceResponse:
    """The SSE response for one chat's or run's events; 422 for a malformed resume id."""
    try:
        after = resume_from(request.headers.get("last-event-id"), request.query_params.get("after"))
    except ValueError as err:
        raise HTTPException(status_code=422, detail=str(err)) from None
    settings = request.app.state.settings
    return EventSourceResponse(
        relay(request.app.state.stream_redis, keys.events(owner_id), after),
        headers=NO_BUFFERING,
        ping=settings.api_ping_interval,
        send_timeout=SEND_TIMEOUT,
    )
