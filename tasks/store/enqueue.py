"""Enqueueing a chat turn: the chat's last turn is looked at and the new turn written in one script, one round trip.

The new turn's record, its place in the chat's queue and turn list, its `turn.queued` event and the pending mark
are written together, so a reader never sees a turn in the queue without its record. A failed last turn is
handed back unwritten when asked: re-sending its text retries it instead (the caller compares the texts), and
only then does the caller ask again with `if_failed` off.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from tasks.store import keys
from tasks.store.records import TERMINAL

# KEYS: turn list, queue, round slot, events, PENDING, the new record.
# ARGV: record key prefix, owner id, new turn id, now, the queued event, hand back a failed last turn ('1'/'0'),
# the terminal statuses (JSON) as one space-separated list, then the new record's fields and values.
_ENQUEUE = """
local last = redis.call('LINDEX', KEYS[1], -1)
local status = false
if last then
  status = redis.call('HGET', ARGV[1] .. last, 'status')
  if status == '"failed"' and ARGV[6] == '1' then return last end
end
local fields = {}
for i = 8, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[6], unpack(fields))
local queued = redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('RPUSH', KEYS[1], ARGV[3])
-- A new message invalidates a finished turn's stored round; an unfinished turn may still be about to resume from
-- its own (an automatic resume), so its round is left alone. A last turn without a record counts as finished.
if not status or string.find(' ' .. ARGV[7] .. ' ', ' ' .. status .. ' ', 1, true) then
  redis.call('DEL', KEYS[3])
end
redis.call('XADD', KEYS[4], '*', 'e', ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[2])
return queued
"""

_TERMINAL_JSON = " ".join(sorted(json.dumps(s) for s in TERMINAL))


@dataclass(frozen=True)
class Enqueued:
    """What the script did: handed back a failed last turn (and wrote nothing), or wrote the new turn."""

    failed_last: str | None = None
    ahead: int = 0  # unfinished turns before the new one in the chat's queue when it was written


@dataclass(frozen=True)
class EnqueueCall:
    """The enqueue script's keys and arguments, built without I/O (both clients call it)."""

    keys: list[str]
    args: list[str]


def enqueue_call(
    owner_id: str, turn_id: str, record: Mapping[str, str], event: str, now: float, *, if_failed: bool
) -> EnqueueCall:
    """The script's keys and arguments for writing turn `turn_id` (see `_ENQUEUE`)."""
    fields = [part for item in record.items() for part in item]
    return EnqueueCall(
        keys=[
            keys.turns(owner_id),
            keys.queue(owner_id),
            keys.round_slot(owner_id),
            keys.events(owner_id),
            keys.PENDING,
            keys.record(owner_id, turn_id),
        ],
        args=[
            keys.record(owner_id, ""),
            owner_id,
            turn_id,
            repr(now),
            event,
            "1" if if_failed else "0",
            _TERMINAL_JSON,
            *fields,
        ],
    )


def enqueued(reply: object) -> Enqueued:
    """The script's reply as `Enqueued`."""
    if isinstance(reply, int):
        return Enqueued(ahead=reply - 1)
    return Enqueued(failed_last=reply.decode() if isinstance(reply, bytes) else str(reply))


SCRIPT = _ENQUEUE


class Enqueue:
    """The enqueue script, registered once per (sync) client (EVALSHA after the first call)."""

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(_ENQUEUE)

    def __call__(
        self,
        client: redis.Redis,
        owner_id: str,
        turn_id: str,
        record: Mapping[str, str],
        event: str,
        now: float,
        *,
        if_failed: bool,
    ) -> Enqueued:
        """Write the new turn (and say how many turns are ahead of it); or, with `if_failed`, hand back the id
        of a failed last turn and write nothing."""
        call = enqueue_call(owner_id, turn_id, record, event, now, if_failed=if_failed)
        return enqueued(self._script(keys=call.keys, args=call.args, client=client))
