"""The live stream: a chat's or run's Redis events stream relayed as Server-Sent Events.

Every entry (field `e`, a JSON object) becomes one SSE message: `id:` the Redis stream id, `event:` the
object's `type`, `data:` the object with `"id"` added. Whatever types the stream holds are relayed
(text.delta included); nothing is decided here. Resumption is exclusive: a client that says it has seen
id X gets the entries after X, nothing repeated, nothing skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import HTTPException, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from tasks.client.core import check_stream_id
from tasks.store import keys
from tasks.store.tail import BLOCK_MS, START, tail

log = logging.getLogger("baton.web.stream")

RECONNECT_MS = 1000  # the `retry:` hint: how soon an EventSource reconnects after the stream ends
SEND_TIMEOUT = 30.0  # a client that stops reading for this long is dropped
NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def parse_stream_id(raw: str) -> str:
    """A Redis stream id `MS-SEQ` (each part a 64-bit unsigned integer); ValueError otherwise."""
    return check_stream_id(raw)


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


async def relay(store: aioredis.Redis, key: str, after: str) -> AsyncIterator[ServerSentEvent]:
    """The entries of `key` after `after` (`tasks.store.tail`, the reader `AsyncClient.stream` uses too).

    Runs until the client goes away (sse-starlette cancels it on a disconnect, which also abandons the
    blocked XREAD and closes its connection) or Redis fails (the stream ends; the client reconnects with
    its Last-Event-ID and loses nothing).
    """
    yield ServerSentEvent(comment="open", retry=RECONNECT_MS)
    try:
        async for stream_id, raw in tail(store, key, after, block_ms=BLOCK_MS):
            message = to_message(stream_id, raw)
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
