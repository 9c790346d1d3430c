"""Deleting a chat or a run: every key of it and every index entry naming it, in one script, or nothing.

Which keys a unit has is not listed here: it is `keys.UNIT_KEYS`, the registry every per-unit key function of
tasks/store/keys.py is declared in (a unit test fails for one that is not). The script is handed each registered
key as a template and builds the keys itself from what it reads in the same atomic step (the chat's turn ids, each
record's generation), so a turn or a generation written just before cannot be missed, and a key kind added to
keys.py is deleted without a line here.

Busy units are refused inside the script: a record queued, running or waiting answers `busy` and nothing is
deleted. A unit not busy may still have a worker finishing after its settle, or a stale one whose lease expired:
every write of an execution is fenced on its lease token (tasks/store/fenced.py) and the lease key is deleted
here, so such a write finds no lease and creates nothing (a fenced XADD or RPUSH never runs to create its key).
On a Redis Cluster every key named here shares the unit's slot (keys.py), so this stays one atomic script.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from tasks.store import keys
from tasks.store.replies import text

UNIT = "\x00u\x00"  # where a template takes the unit id
GEN = "\x00g\x00"  # and the generation

# KEYS[1]: the chat's turn list, or the run's record. ARGV: kind ("chat"/"run"), owner id, run id (a run's, else
# ""), then JSON: the owner-scoped keys, the unit templates, the generation templates, the global index keys whose
# member is the owner id, [user index prefix, suffix], the approval-due key, the live-text-trim key, the run set.
# Reply: {'busy', unit id} (nothing deleted) or {'deleted', keys deleted + index entries removed}.
_DELETE = """
local kind, owner, run_id = ARGV[1], ARGV[2], ARGV[3]
local owner_keys = cjson.decode(ARGV[4])
local unit_tpl, gen_tpl = cjson.decode(ARGV[5]), cjson.decode(ARGV[6])
local indexes, user_parts = cjson.decode(ARGV[7]), cjson.decode(ARGV[8])
local approval_due, delta_trim, run_set = ARGV[9], ARGV[10], ARGV[11]
local function fill(tpl, unit, gen)
  local out = string.gsub(tpl, '%z' .. 'u%z', function() return unit end)
  if gen then out = string.gsub(out, '%z' .. 'g%z', function() return gen end) end
  return out
end
local units = {}
if kind == 'chat' then units = redis.call('LRANGE', KEYS[1], 0, -1) else units = {run_id} end
local record_tpl = unit_tpl['record']
local records = {}
for _, unit in ipairs(units) do
  local rec = fill(record_tpl, unit)
  local f = redis.call('HMGET', rec, 'status', 'generation', 'user')
  if f[1] == '"queued"' or f[1] == '"running"' or f[1] == '"waiting"' then return {'busy', unit} end
  records[#records + 1] = {unit, f}
end
local n, user = 0, nil
for i, entry in ipairs(records) do
  local unit, f = entry[1], entry[2]
  if i == 1 and f[3] and f[3] ~= 'null' then user = cjson.decode(f[3]) end
  for _, tpl in pairs(unit_tpl) do n = n + redis.call('DEL', fill(tpl, unit)) end
  local gen = tonumber(f[2]) or 0
  for g = 0, gen do
    for _, tpl in pairs(gen_tpl) do n = n + redis.call('DEL', fill(tpl, unit, tostring(g))) end
  end
end
for _, key in ipairs(owner_keys) do n = n + redis.call('DEL', key) end
for _, key in ipairs(indexes) do n = n + redis.call('ZREM', key, owner) end
if user then n = n + redis.call('ZREM', user_parts[1] .. user .. user_parts[2], owner) end
if run_id ~= '' then n = n + redis.call('SREM', run_set, run_id) end
-- The approval deadlines and live-text trims name the owner first in a JSON list: `["OWNER", unit, ...]`. Both
-- hold only what is pending now (a call waiting, a unit settled within BATON_LIVE_TEXT_RETENTION), so the unit's
-- shard of each is scanned for its entries rather than their members rebuilt from records a stop has rewritten.
for _, key in ipairs({approval_due, delta_trim}) do
  local cursor = '0'
  repeat
    local page = redis.call('ZSCAN', key, cursor, 'MATCH', '\\\\["' .. owner .. '", *', 'COUNT', 200)
    cursor = page[1]
    for i = 1, #page[2], 2 do n = n + redis.call('ZREM', key, page[2][i]) end
  until cursor == '0'
end
return {'deleted', n}
"""

SCRIPT = _DELETE


@dataclass(frozen=True)
class Deleted:
    """What the script did: refused (a unit busy: `busy` names it) or deleted (`deleted`: anything was there)."""

    busy: str | None = None
    deleted: bool = False


def templates(owner_id: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Every registered per-unit key of `owner_id`: the owner-scoped keys themselves, and the unit and generation
    templates by function name (`UNIT` and `GEN` where the script puts a unit id and a generation)."""
    owner_keys: list[str] = []
    unit_tpl: dict[str, str] = {}
    gen_tpl: dict[str, str] = {}
    for name, (scope, build) in sorted(keys.UNIT_KEYS.items()):
        if scope == "owner":
            owner_keys.append(build(owner_id))
        elif scope == "unit":
            unit_tpl[name] = build(owner_id, UNIT)
        else:
            gen_tpl[name] = build(owner_id, UNIT, GEN)
    return owner_keys, unit_tpl, gen_tpl


def user_parts(owner_id: str) -> list[str]:
    """The owner's user-index key around its user's name: `prefix + user + suffix` is `keys.user_index`."""
    marker = "\x00user\x00"
    prefix, _, suffix = keys.user_index(marker, owner_id).partition(marker)
    return [prefix, suffix]


def delete_call(owner_id: str) -> tuple[list[str], list[str]]:
    """The delete script's keys and arguments (no I/O: both clients and the retention sweep run it)."""
    kind, _, ident = owner_id.partition(":")
    owner_keys, unit_tpl, gen_tpl = templates(owner_id)
    first = keys.turns(owner_id) if kind == "chat" else keys.record(owner_id, ident)
    indexes = [keys.by_last(owner_id), keys.active(owner_id), keys.pending(owner_id), keys.doomed(owner_id)]
    args = [
        kind,
        owner_id,
        ident if kind == "run" else "",
        json.dumps(owner_keys),
        json.dumps(unit_tpl),
        json.dumps(gen_tpl),
        json.dumps(indexes),
        json.dumps(user_parts(owner_id)),
        keys.approval_due(owner_id),
        keys.delta_trim(owner_id),
        keys.runs(owner_id),
    ]
    return [first], args


def deleted(reply: list[Any]) -> Deleted:
    if text(reply[0]) == "busy":
        return Deleted(busy=text(reply[1]))
    return Deleted(deleted=int(reply[1]) > 0)


def delete(client: redis.Redis, owner_id: str) -> Deleted:
    """Delete `owner_id` unless it is busy (see the module)."""
    script_keys, args = delete_call(owner_id)
    return deleted(client.eval(SCRIPT, len(script_keys), *script_keys, *args))
