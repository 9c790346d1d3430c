"""Budgets in Redis: a reservation before each provider attempt and its settlement after, each one Lua script.

Where the keys live. A unit's budgets span owners: a user's chats and runs sit on many masters of a cluster
(each unit's keys carry its shard's tag, tasks/store/keys.py), an agent's and the fleet's budget on none in
particular. An attempt's reservation must check and hold every budget that applies to its unit at once, or two
workers could each pass a check the other's hold would have failed; so every budget and every held reservation
is under one hash tag, `{budgets}`, and a reservation is one script on one slot. The price is one hot slot: its
master runs two short scripts per provider attempt for the whole fleet. An attempt lasts seconds and a script
microseconds (bench/budgets.py), so one master carries thousands of attempts a second before it notices; the
alternatives were worse: a budget split per shard cannot say "spent plus reserved never exceeds the limit"
without a second phase, and a cross-slot transaction does not exist. On one Redis or Sentinel the keys are the
same, so nothing here depends on the topology.

Idempotence. A reservation's id is its execution's id and a counter: never reused, so an execution that resumes a
unit can never settle an earlier execution's attempt as its own. A settlement deletes the held entry, and settles
only an entry it finds: a settlement sent twice, or one the sweep settled first, changes nothing. The reserving
script settles, at their worst case, the entries an earlier execution of the same owner left held (that
execution is gone: the lease is this one's), and the lost-worker sweep does the same for a unit it recovers. Each
entry is held under its execution's lease token, and every few seconds the sweep (`release_orphans`) settles at the
worst case any entry whose unit's lease is now another's or nobody's: a pool child killed mid-attempt is requeued at
once, without the lost-worker sweep, and its unit may end without another attempt.

What counts. An attempt is charged to the budgets it was reserved on: a budget set while an attempt is in flight
starts counting with the next one (for a unit's first attempt, one set after its take read that none applied:
tasks/store/ahead.py), and a budget counts from when it is set, not from what units spent before.
"""

from __future__ import annotations

import itertools
import json
import secrets
from datetime import UTC, datetime
from typing import Any

import redis

from agent.loop.spend import BudgetExceeded, Charge
from tasks.store import budget_marks, budget_rules, keys
from tasks.store.preflight import PREFLIGHT, Deferred
from tasks.store.replies import text
from tasks.store.scripts import registered

# `load` reads a budget in one HMGET and rolls its window over (spent back to 0) when its period's current window is
# later than the stored one; `release` settles one held reservation to (tokens, nanos): its reserve leaves every
# budget it was held on (the same budget: same epoch, not one cleared and set again since), and what it cost joins
# their spent. Integers are written with string.format: tostring would write a Lua -0 as "-0", which HINCRBY and
# the readers refuse, and doubles hold the sums exactly far beyond any budget.
_COMMON = """
local function int(x)
  return string.format('%d', x)
end
local function load(k, day, month)
  local v = redis.call('HMGET', k, 'epoch', 'usd', 'tokens', 'period', 'window', 'spent_tokens', 'reserved_tokens',
                       'spent_nanos', 'reserved_nanos')
  if not v[1] then return nil end
  local b = {epoch = v[1], usd = v[2], tokens = v[3], period = v[4], st = tonumber(v[6] or 0),
             rt = tonumber(v[7] or 0), sn = tonumber(v[8] or 0), rn = tonumber(v[9] or 0)}
  local w = 'total'
  if v[4] == 'day' then w = day elseif v[4] == 'month' then w = month end
  if v[5] ~= w and (not v[5] or w > v[5]) then
    redis.call('HSET', k, 'window', w, 'spent_tokens', 0, 'spent_nanos', 0)
    b.st, b.sn = 0, 0
  end
  return b
end
local function release(held, rid, r, tokens, nanos, day, month)
  for k, epoch in pairs(r.s) do
    local b = load(k, day, month)
    if b and b.epoch == epoch then
      redis.call('HSET', k, 'reserved_tokens', int(b.rt - r.t), 'reserved_nanos', int(b.rn - r.n),
                 'spent_tokens', int(b.st + tokens), 'spent_nanos', int(b.sn + nanos))
    end
  end
  redis.call('HDEL', held, rid)
  if redis.call('HLEN', held) == 0 then redis.call('SREM', KEYS[#KEYS], held) end  -- the holders' set is last
end
"""

# KEYS: the unit's budget keys, its owner's held hash, the holders' set. ARGV: reservation id, the execution's lease
# token (whose entries are not orphans), tokens, nanos, day,
# month. Reply {1} (held), {2} (no budget applies: nothing held, nothing to settle), or {0, index of the budget it
# would pass, 'usd'|'tokens', spent, reserved, limit, period}.
RESERVE = _COMMON + """
local held, holders = KEYS[#KEYS - 1], KEYS[#KEYS]
local rid, exe, t, n, day, month = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
-- No budget of the unit's and nothing its owner holds (a fleet without budgets): one command, not five.
if redis.call('EXISTS', unpack(KEYS, 1, #KEYS - 1)) == 0 then return {2} end
if redis.call('HEXISTS', held, rid) == 1 then return {1} end
local old = redis.call('HGETALL', held)
for i = 1, #old, 2 do
  local r = cjson.decode(old[i + 1])
  if r.x ~= exe then release(held, old[i], r, r.t, r.n, day, month) end
end
local on, found = {}, {}
for i = 1, #KEYS - 2 do
  local b = load(KEYS[i], day, month)
  if b then
    if b.tokens and b.tokens ~= '' and b.st + b.rt + t > tonumber(b.tokens) then
      return {0, i, 'tokens', int(b.st), int(b.rt), b.tokens, b.period}
    end
    if n > 0 and b.usd and b.usd ~= '' and b.sn + b.rn + n > tonumber(b.usd) then
      return {0, i, 'usd', int(b.sn), int(b.rn), b.usd, b.period}
    end
    on[KEYS[i]], found[KEYS[i]] = b.epoch, b
  end
end
if next(on) == nil then return {2} end
for k, b in pairs(found) do
  redis.call('HSET', k, 'reserved_tokens', int(b.rt + t), 'reserved_nanos', int(b.rn + n))
end
redis.call('HSET', held, rid, cjson.encode({x = exe, t = t, n = n, s = on}))
redis.call('SADD', holders, held)
return {1}
"""

# KEYS: the owner's held hash, the holders' set. ARGV: reservation id, tokens, nanos ('worst': what it holds), day,
# month.
# Reply 1 (settled now) or 0 (not held: settled already). The budgets it names share the hash tag, so one slot.
SETTLE = _COMMON + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local r = cjson.decode(raw)
local t, n = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[2] == 'worst' then t, n = r.t, r.n end
release(KEYS[1], ARGV[1], r, t, n, ARGV[4], ARGV[5])
return 1
"""

# KEYS: the budget. ARGV: a new epoch, usd limit (nanos, '' for none), tokens limit ('' for none), period, window.
# A budget set again keeps what it spent and holds (raising a limit does not forget the month so far).
SET = """
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then
  redis.call('HSET', k, 'epoch', ARGV[1], 'spent_tokens', 0, 'spent_nanos', 0, 'reserved_tokens', 0,
             'reserved_nanos', 0, 'window', ARGV[5])
elseif redis.call('HGET', k, 'period') ~= ARGV[4] then
  redis.call('HSET', k, 'window', ARGV[5])
end
redis.call('HSET', k, 'usd', ARGV[2], 'tokens', ARGV[3], 'period', ARGV[4])
return redis.call('HGETALL', k)
"""


def now_utc() -> datetime:
    return datetime.now(UTC)


def set_args(scope: str, usd: float | None, tokens: int | None, period: str, now: datetime) -> list[str]:
    """The SET script's ARGV (the limits checked first: `BudgetError`)."""
    nanos, limit = budget_rules.check_limits(usd, tokens, period)
    return [
        secrets.token_hex(8),
        "" if nanos is None else str(nanos),
        "" if limit is None else str(limit),
        period,
        budget_rules.window(period, now),
    ]


def set_budget(client: redis.Redis, scope: str, usd: float | None, tokens: int | None, period: str) -> dict[str, Any]:
    """Set (or change) the budget of `scope`; returns `c.budget(scope)`'s answer."""
    budget_rules.check_scope(scope)
    now = now_utc()
    args = set_args(scope, usd, tokens, period, now)
    budget_marks.mark_all(client)  # before the budget: see tasks/store/budget_marks.py
    raw = client.eval(SET, 1, keys.budget(scope), *args)
    out = budget_rules.answer(scope, raw, now)
    assert out is not None
    return out


def read_budget(client: redis.Redis, scope: str) -> dict[str, Any] | None:
    """`c.budget(scope)`'s answer, None when `scope` has no budget."""
    budget_rules.check_scope(scope)
    return budget_rules.answer(scope, client.hgetall(keys.budget(scope)), now_utc())


def clear_budget(client: redis.Redis, scope: str) -> bool:
    """Remove the budget of `scope` (reservations held on it are forgotten by it); False when it had none."""
    budget_rules.check_scope(scope)
    return bool(client.delete(keys.budget(scope)))


NOTHING_HELD = ""  # the id of a reservation no budget held: nothing to settle


def applying(owner_id: str, scopes: list[str]) -> list[str]:
    """The keys whose existence says whether a reservation holds anything: the unit's budgets and what its owner holds
    (none of them: a fleet without budgets, one command; also what the take reads ahead, tasks/store/ahead.py)."""
    return [*(keys.budget(s) for s in scopes), keys.budget_held(owner_id)]


class RedisSpend:
    """A unit's budgets for one execution: the `Spend` the loop reserves from and settles to.

    `deferred`: the provider is behind the fleet's rate gate, whose admission comes next with nothing between; the
    reservation then goes in the admission's round trip (tasks/store/preflight.py), not in one of its own."""

    def __init__(
        self, client: redis.Redis, owner_id: str, scopes: list[str], holder: str, *, deferred: bool = False
    ) -> None:
        """`holder`: the execution's lease token. An entry held under another token is an orphan: its execution
        lost the lease (it is gone, or will write nothing more), so its reservation is settled at the worst case."""
        self.execution = secrets.token_hex(8)  # reservation ids: unique, and free of the lease token
        self._client = client
        self._scopes = scopes
        self._holder = holder
        self._keys = [*applying(owner_id, scopes), keys.BUDGET_HOLDERS]
        self._held = self._keys[-2]
        self._reserve = registered(client, RESERVE)
        self._settle = registered(client, SETTLE)
        self._count = itertools.count(1)
        self._deferred = deferred
        self._waiting: dict[str, Deferred] = {}  # deferred reservations not answered yet
        self._holding: set[str] = set()  # reservations a budget holds, to settle

    def reserve(self, worst: Charge) -> str:
        """Hold `worst` on every budget of the unit, or raise `BudgetExceeded` naming the one it would pass (when
        deferred: in the rate gate's round trip, before anything is sent)."""
        if PREFLIGHT.no_budget(self._keys[:-1]):
            return NOTHING_HELD  # the take read that no budget of the unit exists, nor anything its owner holds
        rid = f"{self.execution}:{next(self._count)}"
        now = now_utc()
        day, month = budget_rules.windows(now)
        args: list[Any] = [rid, self._holder, worst.tokens, worst.nanos, day, month]
        if self._deferred:
            call = Deferred(self._reserve, self._keys, args, lambda reply: self._answered(rid, worst, now, reply))
            self._waiting[rid] = call
            PREFLIGHT.defer(call)
            return rid
        self._answered(rid, worst, now, self._reserve(keys=self._keys, args=args))
        return rid if rid in self._holding else NOTHING_HELD

    def _answered(self, rid: str, worst: Charge, now: datetime, reply: Any) -> None:
        self._waiting.pop(rid, None)
        if int(reply[0]) == 1:
            self._holding.add(rid)
            return
        if int(reply[0]) == 2:
            return  # no budget applies: nothing held, nothing to settle
        index, unit, spent, reserved, limit, period = reply[1:7]
        scope = self._scopes[int(index) - 1]
        asked = worst.tokens if text(unit) == "tokens" else worst.nanos
        message = budget_rules.refusal(
            scope, text(unit), int(spent), int(reserved), int(limit), asked, text(period), now
        )
        raise BudgetExceeded(message, scope=scope)

    def settle(self, reservation: str, actual: Charge) -> bool:
        """Settle `reservation` to `actual`; False when nothing held it (no budget applied, or it never went)."""
        waiting = self._waiting.pop(reservation, None)
        if waiting is not None and PREFLIGHT.withdraw(waiting):
            return False  # the attempt ended before its gate asked: never reserved
        if reservation not in self._holding:
            return False  # no budget applied when it was reserved: one command per attempt, not two
        self._holding.discard(reservation)
        day, month = budget_rules.windows(now_utc())
        args: list[str | int] = [reservation, actual.tokens, actual.nanos, day, month]
        self._settle(keys=[self._held, keys.BUDGET_HOLDERS], args=args)
        return True


def release_lost(client: redis.Redis, owner_id: str) -> int:
    """Settle at their worst case every reservation the owner's units hold (the sweep, for a unit whose worker was
    lost: the attempt may have been billed). Returns how many it settled."""
    held = keys.budget_held(owner_id)
    day, month = budget_rules.windows(now_utc())
    script = registered(client, SETTLE)
    settled = 0
    for rid in client.hkeys(held):
        settled += int(script(keys=[held, keys.BUDGET_HOLDERS], args=[text(rid), "worst", "worst", day, month]))
    return settled


def release_orphans(client: redis.Redis) -> int:
    """Settle at the worst case every reservation whose execution no longer holds its unit's lease (the sweep's,
    every few seconds): a worker lost mid-attempt, or a pool child killed mid-attempt whose unit then ended without
    another attempt. Two pipelined reads whatever the number of units in flight; returns how many it settled.

    The entries are read before the leases: an entry written under a newer lease is then compared with that lease's
    token (or a later one), never taken for an orphan while its execution holds the lease."""
    held_keys = [text(k) for k in client.smembers(keys.BUDGET_HOLDERS)]
    if not held_keys:
        return 0
    reads = client.pipeline(transaction=False)
    for held_key in held_keys:
        reads.hgetall(held_key)
    entries = reads.execute()
    owners = [k.removeprefix(keys.budget_held("")) for k in held_keys]
    leases = client.pipeline(transaction=False)
    for owner_id in owners:
        leases.get(keys.lease(owner_id))
    tokens = leases.execute()
    script = registered(client, SETTLE)
    day, month = budget_rules.windows(now_utc())
    settled = 0
    for held_key, held_entries, token in zip(held_keys, entries, tokens, strict=True):
        holder = text(token) if token is not None else None
        for rid, raw in held_entries.items():
            if json.loads(text(raw)).get("x") != holder:
                args = [text(rid), "worst", "worst", day, month]
                settled += int(script(keys=[held_key, keys.BUDGET_HOLDERS], args=args))
    return settled


def held(client: redis.Redis, owner_id: str) -> dict[str, dict[str, Any]]:
    """The reservations the owner's units hold now (for tests and `baton budget show`'s readers)."""
    return {text(k): json.loads(text(v)) for k, v in client.hgetall(keys.budget_held(owner_id)).items()}
