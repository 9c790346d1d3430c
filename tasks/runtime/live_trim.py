"""Deleting a settled unit's live text: its `text.delta` and `reasoning.delta` entries go once their retention is up.

The transcript is the record of what was said; the deltas only serve clients that watch (or reconnect)
while the unit runs, so keeping them would grow each chat's stream by every token ever streamed.
The settle schedules the deletion in `keys.DELTA_TRIM`; every worker's sweep carries out what is due.

The same moment ends what a settled unit costs beyond its history. Its owner's settled signal (`keys.settled`)
serves only callers waiting for an end, and a waiter does not need the key to exist (XREAD on a missing stream
blocks until the next XADD creates it, with a later id): it is deleted. And the events stream is rewritten at its
used size: Redis preallocates a stream's last node (4 KB, whatever it holds) and gives the slack back only when a
new node starts, so a chat's few events cost 4.7 KB; DUMP and RESTORE in one script keep every entry, every id and
the last id, in a node of the bytes they use. The settled record drops the fields still at their defaults
(`UnitRecord` reads a missing field as its default; every script reading one treats nil as null): a record holds a
reply and a usage longer than a compact hash's 64-byte values, so each field costs some 80 bytes of hash table.
Measured by bench/store_bytes.py (README, "Redis memory").
"""

from __future__ import annotations

import json

import redis

from agent.events import LIVE_DELTAS
from tasks.store import indexes, keys
from tasks.store.records import UnitRecord
from tasks.store.replies import stream_entries, text

PAGE = 500

# KEYS: a unit's record. ARGV: field, default JSON, ... Only a finished unit's, and a field only while it holds its
# default, checked in the script: a retry writing the record meanwhile keeps every field it wrote.
_SLIM = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"completed"' and status ~= '"failed"' and status ~= '"stopped"' then return 0 end
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return n
"""
KEPT = frozenset({"kind", "owner_id", "unit_id", "status", "text", "task_id", "created_at", "updated_at"})


def defaults() -> list[str]:
    """[field, its default as `to_hash` writes it, ...] for every field a settled record may drop."""
    fields = UnitRecord(kind="turn", owner_id="", unit_id="").to_hash()
    return [part for name, value in fields.items() if name not in KEPT for part in (name, value)]


# KEYS: the events stream. Atomic: no entry can be appended between the DUMP and the RESTORE. A missing stream, or
# one with a TTL (never set by Baton: left alone rather than made permanent), is not touched.
_COMPACT = """
if redis.call('PTTL', KEYS[1]) ~= -1 then return 0 end
redis.call('RESTORE', KEYS[1], 0, redis.call('DUMP', KEYS[1]), 'REPLACE')
return 1
"""


def trim_live_text(client: redis.Redis, now: float, *, limit: int = 20) -> int:
    """Delete the live text of units whose retention has passed; returns how many entries were deleted."""
    deleted = 0
    for shard, member, _ in indexes.due(client, keys.DELTA_TRIM, now, limit=limit):
        if not client.zrem(shard, member):
            continue  # another worker's sweep took this one
        owner_id, unit_id, since_ms = json.loads(member)
        deleted += _trim_unit(client, keys.events(owner_id), unit_id, int(since_ms))
        client.delete(keys.settled(owner_id))
        client.eval(_COMPACT, 1, keys.events(owner_id))
        client.eval(_SLIM, 1, keys.record(owner_id, unit_id), *defaults())
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
    body = text(raw)
    if '"text.delta"' not in body and '"reasoning.delta"' not in body:  # most entries are not deltas: not parsed
        return False
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return bool(data.get("type") in LIVE_DELTAS and data.get("turn_id") == unit_id)
