"""Enqueueing a chat turn: the chat's last turn is looked at and the new turn written in one script, one round trip.

The new turn's record, its place in the chat's queue and turn list, its `turn.queued` event and the pending mark
are written together, so a reader never sees a turn in the queue without its record. A failed last turn is
handed back unwritten when asked: re-sending its text retries it instead (the caller compares the texts), and
only then does the caller ask again with `if_failed` off.

Where the broker is this same Redis, the caller may hand over the turn's task message as the Redis commands kombu
would send (`Publisher.prepared`): the script runs them when the new turn is its chat's head, so the turn and its
message are written in one round trip, and a queued turn is never left without its message by a caller that died
between the two. A turn that is not the head is published by the settle ahead of it, as before; one that took the
chat's agent goes to that agent's queue, which the prepared message may not name, and the caller publishes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from tasks.store import keys
from tasks.store.deletion import user_parts
from tasks.store.fenced import RUN_OPS, Batch
from tasks.store.records import TERMINAL
from tasks.store.replies import text
from tasks.store.scripts import registered

OnBusy = Literal["enqueue", "interrupt", "reject"]

# KEYS: turn list, queue, round slot, events, PENDING, the new record, the chat's stop key, the chats' listing index,
# the chat's settled signal.
# ARGV: record key prefix, owner id, new turn id, now, the queued event, hand back a failed last turn ('1'/'0'),
# the terminal statuses (JSON) as one space-separated list, on_busy, '1' when the turn keeps the chat's agent, the
# person's listing index key before and after its user's name (`deletion.user_parts`), the queue the prepared task
# message goes to (the record's JSON of it), the number of the new record's fields and values and then them, then
# the task message's commands as a fenced batch's ops (`RUN_OPS`), their keys after the script's nine (none: no
# message).
# Replies: {'failed', id} (nothing written), {'busy', id} (reject: nothing written), or {'queued', position,
# the id of a parked head woken to stop ('' for none), the chat's agent and queue (JSON) when the turn took
# them (else false), the settled signal's last id ('0-0': none yet), 1 when the task message was published, and the
# reply of its first read (the task-sent event's PUBLISH: how many heard it; -1: none)}.
_ENQUEUE = RUN_OPS + """
local function finished(status)
  return not status or string.find(' ' .. ARGV[7] .. ' ', ' ' .. status .. ' ', 1, true)
end
local mode = ARGV[8]
-- The chat's unfinished turns, oldest first: the one running (or about to) and those queued behind it.
local busy = {}
if mode ~= 'enqueue' then
  for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if not finished(redis.call('HGET', ARGV[1] .. id, 'status')) then busy[#busy + 1] = id end
  end
  if mode == 'reject' and #busy > 0 then return {'busy', busy[1]} end
end
local last = redis.call('LINDEX', KEYS[1], -1)
local status = false
if last then
  status = redis.call('HGET', ARGV[1] .. last, 'status')
  if status == '"failed"' and ARGV[6] == '1' then return {'failed', last} end
end
local after_fields = 14 + tonumber(ARGV[13])
local fields = {}
for i = 14, after_fields - 1 do fields[#fields + 1] = ARGV[i] end
-- A turn that names no agent keeps the chat's: the last turn's agent and queue (none before it: the fleet's default),
-- written after the caller's (a field named twice in one HSET takes its last value).
local agent, agent_queue = false, false
if ARGV[9] == '1' and last then
  local had = redis.call('HMGET', ARGV[1] .. last, 'agent', 'queue')
  if had[1] and had[1] ~= 'null' then
    agent, agent_queue = had[1], had[2] or 'null'
    fields[#fields + 1] = 'agent'
    fields[#fields + 1] = agent
    fields[#fields + 1] = 'queue'
    fields[#fields + 1] = agent_queue
  end
end
redis.call('HSET', KEYS[6], unpack(fields))
local queued = redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('RPUSH', KEYS[1], ARGV[3])
-- A new message invalidates a finished turn's stored round; an unfinished turn may still be about to resume from
-- its own (an automatic resume), so its round is left alone. A last turn without a record counts as finished.
if finished(status) then
  redis.call('DEL', KEYS[3])
end
redis.call('XADD', KEYS[4], '*', 'e', ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[2])
-- The message is the chat's latest activity: its place in the listing, for everyone and for its person (the user
-- its first message named: a chat is theirs from then on).
redis.call('ZADD', KEYS[8], ARGV[4], ARGV[2])
local first = redis.call('LINDEX', KEYS[1], 0)
local user = redis.call('HGET', ARGV[1] .. first, 'user')
if user and user ~= 'null' then redis.call('ZADD', ARGV[10] .. cjson.decode(user) .. ARGV[11], ARGV[4], ARGV[2]) end
local woken = ''
if mode == 'interrupt' and #busy > 0 then
  -- Every unfinished turn ahead stops as a user stop does, with the interrupt's notice: the running one by the
  -- stop key its watcher polls, the queued ones by their records when the hand-off starts them. The new turn
  -- is published by the hand-off of the last of them to settle.
  for _, id in ipairs(busy) do redis.call('HSET', ARGV[1] .. id, 'stop_reason', '"interrupt"') end
  redis.call('SET', KEYS[7], busy[1], 'EX', 86400)
  local head = ARGV[1] .. busy[1]
  if redis.call('HGET', head, 'status') == '"waiting"' and redis.call('HGET', head, 'waiting_reason') == '"approval"'
  then
    -- Parked for approval, it holds no worker to see the flag: back to queued, and the caller publishes it.
    redis.call('HSET', head, 'status', '"queued"', 'waiting_reason', 'null', 'updated_at', ARGV[4])
    woken = busy[1]
  end
end
-- Where a caller that waits for this turn reads the settled signal from: every ending or park of it comes after.
local tail = redis.call('XREVRANGE', KEYS[9], '+', '-', 'COUNT', 1)
local published, heard = 0, -1
if after_fields <= #ARGV and queued == 1 and (not agent_queue or agent_queue == ARGV[12]) then
  heard = run_ops(after_fields, 8, {}, nil)[1] or -1
  published = 1
end
return {'queued', queued, woken, agent, agent_queue, tail[1] and tail[1][1] or '0-0', published, heard}
"""

_TERMINAL_JSON = " ".join(sorted(json.dumps(s) for s in TERMINAL))


@dataclass(frozen=True)
class Enqueued:
    """What the script did: handed back a failed last turn (and wrote nothing), or wrote the new turn."""

    failed_last: str | None = None
    ahead: int = 0  # unfinished turns before the new one in the chat's queue when it was written
    busy: str | None = None  # `reject`: the chat's oldest unfinished turn (and nothing was written)
    woken: str | None = None  # `interrupt`: the head turn parked for approval, woken to stop (the caller sends it)
    inherited: bool = False  # the turn named no agent and took the chat's (below)
    agent: str | None = None  # the chat's agent, when it was inherited
    queue: str | None = None  # and its queue
    # the chat's settled signal's last id when the turn was written (a read beside the write: not what it did)
    settled_tail: str | None = field(default=None, compare=False)
    published: bool = False  # the script published the prepared task message (see the module)
    # how many received the task-sent event it published with it (None: none), for `Publisher.heard`
    listeners: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EnqueueCall:
    """The enqueue script's keys and arguments, built without I/O (both clients call it)."""

    keys: list[str]
    args: list[str]


def enqueue_call(
    owner_id: str,
    turn_id: str,
    record: Mapping[str, str],
    event: str,
    now: float,
    *,
    if_failed: bool,
    on_busy: OnBusy = "enqueue",
    message: Batch | None = None,
) -> EnqueueCall:
    """The script's keys and arguments for writing turn `turn_id` (see `_ENQUEUE`); `message`: the turn's task
    message as the Redis commands that publish it, for the script to run when the turn is its chat's head."""
    fields = [part for item in record.items() for part in item]
    return EnqueueCall(
        keys=[
            keys.turns(owner_id),
            keys.queue(owner_id),
            keys.round_slot(owner_id),
            keys.events(owner_id),
            keys.pending(owner_id),
            keys.record(owner_id, turn_id),
            keys.stop(owner_id),
            keys.by_last(owner_id),
            keys.settled(owner_id),
            *(message.keys if message else ()),
        ],
        args=[
            keys.record(owner_id, ""),
            owner_id,
            turn_id,
            repr(now),
            event,
            "1" if if_failed else "0",
            _TERMINAL_JSON,
            on_busy,
            "1" if record.get("agent", "null") == "null" else "0",
            *user_parts(owner_id),
            record.get("queue", "null"),
            str(len(fields)),
            *fields,
            *(message.ops_args(compact=False) if message else ()),
        ],
    )


def enqueued(reply: list[Any]) -> Enqueued:
    """The script's reply as `Enqueued`."""
    what = text(reply[0])
    if what == "failed":
        return Enqueued(failed_last=text(reply[1]))
    if what == "busy":
        return Enqueued(busy=text(reply[1]))
    ahead, woken = int(reply[1]) - 1, text(reply[2]) or None
    tail = text(reply[5]) if len(reply) > 5 and reply[5] else None
    published = len(reply) > 6 and int(reply[6]) == 1
    listeners = int(reply[7]) if len(reply) > 7 and int(reply[7]) >= 0 else None
    if len(reply) > 3 and reply[3]:
        agent, queue = json.loads(text(reply[3])), json.loads(text(reply[4]))
        return Enqueued(ahead=ahead, woken=woken, inherited=True, agent=agent, queue=queue, settled_tail=tail,
                        published=published, listeners=listeners)
    return Enqueued(ahead=ahead, woken=woken, settled_tail=tail, published=published, listeners=listeners)


SCRIPT = _ENQUEUE


class Enqueue:
    """The enqueue script, registered once per (sync) client (EVALSHA after the first call)."""

    def __init__(self, client: redis.Redis) -> None:
        self._script = registered(client, _ENQUEUE)

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
        on_busy: OnBusy = "enqueue",
        message: Batch | None = None,
    ) -> Enqueued:
        """Write the new turn (and say how many turns are ahead of it); or, with `if_failed`, hand back the id
        of a failed last turn and write nothing; or, with `on_busy="reject"` and a turn unfinished, write nothing
        and name it. With `on_busy="interrupt"` every unfinished turn ahead is marked to stop, in the same script."""
        call = enqueue_call(
            owner_id, turn_id, record, event, now, if_failed=if_failed, on_busy=on_busy, message=message
        )
        return enqueued(self._script(keys=call.keys, args=call.args, client=client))
