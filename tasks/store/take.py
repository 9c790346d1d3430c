"""An execution's first round trip: its record, and when it may run, its lease, what it starts from, and the start.

One script: the record is read; a finished unit, or a chat turn not at its queue's head, stops there; otherwise
the lease is taken (SET NX) and, when it was, the stop and drain flags and the transcript are read after it
(so they see every write of the previous holder, whose writes were fenced). Before this, the same came in two
round trips: the record with the queue's head, then the lease with the reads.

A unit's first start (generation 0, not started: the common case) is written in the same script, right after
the lease is taken: the caller's `start` batch (the user's message, `*.started`, the record running) with the
record's text and the transcript's length filled in (`fenced.fill`), so a crash leaves either nothing of the
execution or its lease with the start, as a crash after a separate start write would. The batch is built by
the same Python code as any other start, so the message and event formats have one source; the script only
puts the record's stored text (a JSON string literal) where the message's text goes, and only when that literal
is exactly what the message's encoder writes (no `\\u` escape: Python's and pydantic's encoders differ there).
Any other case (a retry, a resume, a draining worker, an escaped text, a message with files: their blocks are
the record's, which the caller reads first) is started by the caller as before.

The transcript is not read by the script: each message a script reads becomes a Lua string and then a reply again,
which cost the server ~0.6 µs a message (600 µs for a chat of 1,000 messages, against 90 for a plain `LRANGE`).
The script returns the transcript's length after its own writes, and an `LRANGE` sent right behind it on the same
connection reads the list. A transcript is only ever appended to (RPUSH) or deleted, so the first `length` entries
of that read are the transcript as the script left it; a read that came back shorter (it ran before the script, which
a server that lost its scripts runs again after it) is made again, up to that length.

Where the store can fail over under the execution (behind Sentinel, on a cluster), the script also reads its
master's `INFO replication` before anything else (`replication`): the history a failover would change and the
replicas a write tool waits for, which were a round trip of their own before every take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis
from redis._parsers.helpers import parse_info  # how redis-py reads an INFO reply: the same dict as `client.info()`

from tasks.store import keys
from tasks.store.ahead import Ask, take_asking
from tasks.store.direct import Call, in_one_trip, raised
from tasks.store.fenced import RUN_OPS, Batch, fill_mark
from tasks.store.lease import Lease
from tasks.store.replies import text_or_none
from tasks.store.scripts import registered

TEXT, HISTORY_LEN = "text", "history_len"  # what a `start` batch may leave to the script (`fenced.fill`)

# KEYS: record, queue, lease, stop, drain, transcript, then the start batch's keys. ARGV: unit id, token, ttl ms,
# "1" to check the head, "1" when there is a start batch ("" for none), the marks of TEXT and HISTORY_LEN, the agent
# and model the batch starts the unit with (JSON): a record naming others is started by the caller, which resolves
# them; "1" to read INFO replication; then the start batch's ops (`Batch.ops_args`).
# Replies, after the INFO replication text (false when not asked): {record} (missing or finished), {record, head}
# (not the head), {record, head, 0} (lease held), {record, head, 1, stop, draining, the transcript's length after the
# start, started, the record's history_len as read}. A nil head (not checked, or an empty queue) comes as false.
_TAKE = RUN_OPS + """
local info = false
if ARGV[10] == '1' then info = redis.call('INFO', 'replication') end
local rec = redis.call('HGETALL', KEYS[1])
local status, history_len, generation, text, agent, model, files = nil, '-1', '0', nil, 'null', 'null', '[]'
for i = 1, #rec, 2 do
  local field = rec[i]
  if field == 'status' then status = rec[i + 1]
  elseif field == 'history_len' then history_len = rec[i + 1]
  elseif field == 'generation' then generation = rec[i + 1]
  elseif field == 'text' then text = rec[i + 1]
  elseif field == 'agent' then agent = rec[i + 1]
  elseif field == 'model' then model = rec[i + 1]
  elseif field == 'files' then files = rec[i + 1] end
end
if #rec == 0 or status == '"completed"' or status == '"failed"' or status == '"stopped"' then
  return {info, rec}
end
local head = false
if ARGV[4] == '1' then
  head = redis.call('LINDEX', KEYS[2], 0)
  if head ~= ARGV[1] then return {info, rec, head} end
end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {info, rec, head, 0}
end
local hl = tonumber(history_len) or -1
local stop, draining = redis.call('GET', KEYS[4]), redis.call('EXISTS', KEYS[5])
local started = 0
if ARGV[5] ~= '' and hl < 0 and tonumber(generation) == 0 and draining == 0 and text ~= nil and files == '[]'
   and (agent == 'null' or agent == ARGV[8]) and (model == 'null' or model == ARGV[9])
   and #text >= 2 and string.sub(text, 1, 1) == '"' and string.sub(text, -1) == '"'
   and not string.find(text, '\\\\u', 1, true) then
  local fills = {}
  fills[ARGV[6]] = text
  fills[ARGV[7]] = function() return tostring(pushed[KEYS[6]] or redis.call('LLEN', KEYS[6])) end
  run_ops(11, 5, {}, fills)  -- the batch's keys follow this script's six, its ops its ten arguments
  started = 1
end
-- The transcript's length as the start left it (its push said so), else as it is: the read behind this script
-- reads the list itself.
return {info, rec, head, 1, stop, draining, pushed[KEYS[6]] or redis.call('LLEN', KEYS[6]), started, hl}
"""


@dataclass(frozen=True)
class Taken:
    """What the first round trip read; `acquired` is None when the lease was not tried (see the module).

    `started`: the script wrote the `start` batch; `transcript` then ends with the message it pushed.
    `replication`: the master's `INFO replication`, parsed, when asked for (else None).
    """

    record: dict[bytes | str, bytes | str]
    head: str | None
    acquired: bool | None
    stop: str | None = None
    draining: bool = False
    transcript: list[bytes | str] | None = None
    started: bool = False
    replication: dict[str, Any] | None = None


def take(
    client: redis.Redis,
    lease: Lease,
    *,
    owner_id: str,
    unit_id: str,
    hostname: str,
    check_head: bool,
    start: Batch | None = None,
    starts_as: tuple[str, str] = ("", ""),
    replication: bool = False,
    ask: Ask | None = None,
) -> Taken:
    """Read the unit's record and, if it may run (unfinished, and with `check_head` its chat's head), take the
    lease and read the stop and drain flags and the transcript (to the unit's `history_len`, all when -1).

    `start`: a first generation's start, written with the lease when the record is one (see the module); it may
    leave the record's text (`fill(TEXT)`) and the transcript's length after its own pushes (`fill(HISTORY_LEN)`)
    to the script. `starts_as`: the agent and model `start` runs the unit with; only a record naming them (or
    naming none) is started by it. `replication`: read the master's INFO replication first (see the module).
    `ask`: what the first model call's preflight needs, asked in the same round trip (tasks/store/ahead.py)."""
    own = [
        keys.record(owner_id, unit_id),
        keys.queue(owner_id),
        lease.key,
        keys.stop(owner_id),
        keys.drain(hostname, owner_id),
        keys.transcript(owner_id),
    ]
    call = (
        registered(client, _TAKE),
        [*own, *(start.keys if start else ())],
        [
            unit_id,
            lease.token,
            lease.ttl_ms,
            "1" if check_head else "0",
            "1" if start else "",
            fill_mark(TEXT),
            fill_mark(HISTORY_LEN),
            json.dumps(starts_as[0]),
            json.dumps(starts_as[1]),
            "1" if replication else "",
            *(start.ops_args(compact=False) if start else ()),
        ],
    )
    transcript = own[5]
    read = Call(("LRANGE", transcript, 0, -1), transcript, lambda: client.lrange(transcript, 0, -1))
    if ask is None:
        reply, listed = in_one_trip(client, [Call.script(client, *call), read])
        reply = raised(reply)
    else:
        reply, listed = take_asking(client, call, ask, read)
    info = parse_info(text_or_none(reply[0])) if reply[0] else None
    reply = reply[1:]
    flat = reply[0]
    record = dict(zip(flat[::2], flat[1::2], strict=True))
    head = text_or_none(reply[1]) if len(reply) > 1 else None
    if len(reply) < 3:
        return Taken(record, head, None, replication=info)
    if not reply[2]:
        return Taken(record, head, False, replication=info)
    history = as_left(client, transcript, listed, int(reply[5]), int(reply[7]))
    return Taken(record, head, True, text_or_none(reply[3]), bool(reply[4]), history, bool(reply[6]), replication=info)


def as_left(client: redis.Redis, key: str, listed: Any, length: int, history_len: int) -> list[bytes | str]:
    """The transcript as the take's script left it (`length` entries), from the read sent behind the script, read
    again where that came back shorter or failed (see the module); a started generation's history ends at its
    `history_len`."""
    entries: list[bytes | str] = listed if isinstance(listed, list) and len(listed) >= length else list(
        client.lrange(key, 0, length - 1)
    )
    return entries[: length if history_len < 0 else min(length, history_len)]
