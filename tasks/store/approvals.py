"""Decisions on calls that wait for approval: written once, atomically with their event, waking the unit when due.

A unit that parks for approval holds no worker and no lease; its record says `waiting` / `approval` and
lists the calls it waits on. A decision (a person's, or the expiry sweep's) is one Lua script: it refuses
an unknown call, keeps the first decision of a call (deciding twice changes nothing and says what was
decided), publishes `tool.approved` / `tool.denied`, and, when it settles the last pending call, puts the
unit back to `queued` and into `keys.PENDING` so the caller's publish (or, after a crash, the lost-message
sweep) starts it on any worker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

import redis

from agent.events import encode_event
from tasks.store import keys
from tasks.store.fenced import EVENTS_MAXLEN
from tasks.store.reads import load_record
from tasks.store.records import UnitRecord
from tasks.store.replies import text_or_none

# KEYS: record, approvals hash, events stream, PENDING, APPROVAL_DUE.
# ARGV: tool_use_id, decision JSON, event JSON, owner id, now, due member, events maxlen.
DECIDE = """
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then return {'already', existing} end
local status = redis.call('HGET', KEYS[1], 'status')
local reason = redis.call('HGET', KEYS[1], 'waiting_reason')
if status ~= '"waiting"' or reason ~= '"approval"' then return {'not_waiting', ''} end
local pending = cjson.decode(redis.call('HGET', KEYS[1], 'approvals') or '[]')
local known = false
for _, call in ipairs(pending) do
  if call['tool_use_id'] == ARGV[1] then known = true end
end
if not known then return {'unknown', ''} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'e', ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[6])
for _, call in ipairs(pending) do
  if redis.call('HEXISTS', KEYS[2], call['tool_use_id']) == 0 then return {'decided', 'wait'} end
end
redis.call('HSET', KEYS[1], 'status', '"queued"', 'waiting_reason', 'null', 'approvals', '[]', 'updated_at', ARGV[5])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
return {'decided', 'resume'}
"""

Decision = Literal["approved", "denied"]


@dataclass(frozen=True)
class Decided:
    """What a decision did: `decided` (and whether the unit now resumes), `already` (the first decision
    stands: `decision` is it), `unknown` (no such call waits), `not_waiting` (the unit waits for nothing)."""

    outcome: Literal["decided", "already", "unknown", "not_waiting"]
    decision: Decision | None = None
    resume: bool = False


def due_member(owner_id: str, unit_id: str, tool_use_id: str) -> str:
    """The `keys.APPROVAL_DUE` member of one waiting call."""
    return json.dumps([owner_id, unit_id, tool_use_id])


def decide_call(
    rec: UnitRecord,
    tool_use_id: str,
    decision: Decision,
    *,
    reason: str | None = None,
    by: str | None = None,
    expired: bool = False,
    now: float,
) -> tuple[list[str], list[str]]:
    """The decide script's keys and arguments (no I/O: the sync and the async client both run it)."""
    body: dict[str, Any] = {"decision": decision, "reason": reason, "by": by, "at": now}
    if expired:
        body["expired"] = True
    owner = rec.owner_id
    data: dict[str, Any] = {"tool_use_id": tool_use_id, "by": by or "someone"}
    if rec.kind == "turn":
        data["turn_id"] = rec.unit_id
    if reason:
        data["reason"] = reason
    event = encode_event(f"tool.{decision}", owner, data, at=now)
    script_keys = [
        keys.record(owner, rec.unit_id),
        keys.approvals(owner, rec.unit_id),
        keys.events(owner),
        keys.pending(owner),
        keys.approval_due(owner),
    ]
    args = [
        tool_use_id,
        json.dumps(body),
        event,
        owner,
        repr(now),
        due_member(owner, rec.unit_id, tool_use_id),
        str(EVENTS_MAXLEN),
    ]
    return script_keys, args


def decided(reply: list[bytes | str], decision: Decision) -> Decided:
    """The decide script's reply to a `decision` as `Decided`."""
    outcome, detail = (text_or_none(part) or "" for part in reply)
    if outcome == "already":
        return Decided("already", json.loads(detail)["decision"])
    if outcome == "decided":
        return Decided("decided", decision, resume=detail == "resume")
    return Decided("unknown" if outcome == "unknown" else "not_waiting")


def decide(
    client: redis.Redis,
    rec: UnitRecord,
    tool_use_id: str,
    decision: Decision,
    *,
    reason: str | None = None,
    by: str | None = None,
    expired: bool = False,
    now: float | None = None,
) -> Decided:
    """Record a decision on one waiting call of `rec` (see the module docstring)."""
    now = time.time() if now is None else now
    script_keys, args = decide_call(rec, tool_use_id, decision, reason=reason, by=by, expired=expired, now=now)
    return decided(client.eval(DECIDE, len(script_keys), *script_keys, *args), decision)


def waiting_call(rec: UnitRecord | None, tool_use_id: str) -> bool:
    """Whether `rec` lists `tool_use_id` among the calls it waits on."""
    return rec is not None and any(call.get("tool_use_id") == tool_use_id for call in rec.approvals)


def find_waiting(client: redis.Redis, owner_id: str, tool_use_id: str, *, recent: int = 20) -> UnitRecord | None:
    """The unit of a chat or run whose call `tool_use_id` waits (or waited) for approval, if any.

    A run is its own unit; a chat's call belongs to its head turn while it waits, and to one of its recent
    turns once decided (so deciding again still says what was decided).
    """
    kind, _, ident = owner_id.partition(":")
    if kind == "run":
        return load_record(client, owner_id, ident)
    turns = client.lrange(keys.turns(owner_id), -recent, -1)
    for raw in reversed(turns):
        turn_id = text_or_none(raw) or ""
        rec = load_record(client, owner_id, turn_id)
        if rec is None:
            continue
        if waiting_call(rec, tool_use_id):
            return rec
        if client.hexists(keys.approvals(owner_id, turn_id), tool_use_id):
            return rec
    return None
