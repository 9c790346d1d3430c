"""Deleting a settled unit's live text: its `text.delta` entries go once their retention is up.

The transcript is the record of what was said; the deltas only serve clients that watch (or reconnect)
while the unit runs, so keeping them would grow each chat's stream by every token ever streamed.
The settle schedules the deletion in `keys.DELTA_TRIM`; every worker's sweep carries out what is due.
"""

from __future__ import annotations

import json

import redis

from agent.events import TEXT_DELTA
from tasks.store import indexes, keys
from tasks.store.replies import stream_entries, text

PAGE = 500


def trim_live_text(client: redis.Redis, now: float, *, limit: int = 20) -> int:
    """Delete the live text of units whose retention has passed; returns how many entries were deleted."""
    deleted = 0
    for shard, member, _ in indexes.due(client, keys.DELTA_TRIM, now, limit=limit):
        if not client.zrem(shard, member):
            continue  # another worker's sweep took this one
        owner_id, unit_id, since_ms = json.loads(member)
        deleted += _trim_unit(client, keys.events(owner_id), unit_id, int(since_ms))
    return deleted


def _trim_unit(client: redis.Redis, stream: str, unit_id: str, since_ms: int) -> int:
    deleted = 0
    start = f"{since_ms}-0"
    while True:
        entries = stream_entries(client.xrange(stream, start, "+", count=PAGE))
        ids = [sid for sid, fields in entries if _is_delta_of(fields.get(b"e", b""), unit_id)]
        if ids:
            deleted += int(client.xdel(stream, *ids))
        if len(entries) < PAGE:
            return deleted
        start = f"({entries[-1][0]}"


def _is_delta_of(raw: bytes | str, unit_id: str) -> bool:
    if '"text.delta"' not in text(raw):  # most entries are not deltas; skip parsing them
        return False
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return bool(data.get("type") == TEXT_DELTA and data.get("turn_id") == unit_id)
