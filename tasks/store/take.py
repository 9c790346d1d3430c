"""An execution's first round trip: its record, and when it may run, its lease and what it starts from.

One script: the record is read; a finished unit, or a chat turn not at its queue's head, stops there; otherwise
the lease is taken (SET NX) and, when it was, the stop and drain flags and the transcript are read after it
(so they see every write of the previous holder, whose writes were fenced). Before this, the same came in two
round trips: the record with the queue's head, then the lease with the reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from tasks.store import keys
from tasks.store.lease import Lease
from tasks.store.replies import text_or_none

# KEYS: record, queue, lease, stop, drain, transcript. ARGV: unit id, token, ttl ms, "1" to check the head.
# Replies: {record} (missing or finished), {record, head} (not the head), {record, head, 0} (lease held),
# {record, head, 1, stop, draining, transcript}. A nil head (not checked, or an empty queue) comes as false.
_TAKE = """
local rec = redis.call('HGETALL', KEYS[1])
local status, history_len = nil, '-1'
for i = 1, #rec, 2 do
  if rec[i] == 'status' then status = rec[i + 1] elseif rec[i] == 'history_len' then history_len = rec[i + 1] end
end
if #rec == 0 or status == '"completed"' or status == '"failed"' or status == '"stopped"' then
  return {rec}
end
local head = false
if ARGV[4] == '1' then
  head = redis.call('LINDEX', KEYS[2], 0)
  if head ~= ARGV[1] then return {rec, head} end
end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {rec, head, 0}
end
local hl = tonumber(history_len) or -1
local last = -1
if hl >= 0 then last = hl - 1 end
return {rec, head, 1, redis.call('GET', KEYS[4]), redis.call('EXISTS', KEYS[5]),
        redis.call('LRANGE', KEYS[6], 0, last)}
"""


@dataclass(frozen=True)
class Taken:
    """What the first round trip read; `acquired` is None when the lease was not tried (see the module)."""

    record: dict[bytes | str, bytes | str]
    head: str | None
    acquired: bool | None
    stop: str | None = None
    draining: bool = False
    transcript: list[bytes | str] | None = None


def take(
    client: redis.Redis, lease: Lease, *, owner_id: str, unit_id: str, hostname: str, check_head: bool
) -> Taken:
    """Read the unit's record and, if it may run (unfinished, and with `check_head` its chat's head), take the
    lease and read the stop and drain flags and the transcript (to the unit's `history_len`, all when -1)."""
    script = client.register_script(_TAKE)
    reply = script(
        keys=[
            keys.record(owner_id, unit_id),
            keys.queue(owner_id),
            lease.key,
            keys.stop(owner_id),
            keys.drain(hostname),
            keys.transcript(owner_id),
        ],
        args=[unit_id, lease.token, lease.ttl_ms, "1" if check_head else "0"],
    )
    flat = reply[0]
    record = dict(zip(flat[::2], flat[1::2], strict=True))
    head = text_or_none(reply[1]) if len(reply) > 1 else None
    if len(reply) < 3:
        return Taken(record, head, None)
    if not reply[2]:
        return Taken(record, head, False)
    return Taken(record, head, True, text_or_none(reply[3]), bool(reply[4]), list(reply[5]))
