"""The fleet's shared rate limits of each endpoint (provider, base URL, key hash, model), in the store.

Two keys per endpoint, under one hash tag (one slot on a cluster, so each script is atomic there too):

- `state` (hash): `block`, the server's time in ms before which nobody sends (a 429's `retry-after`, or a limit the
  provider said is at 0, until its reset); `left` and `left_until`, the requests the provider last said are left
  and when they reset, counted down by each request admitted (so requests in flight, whose answers have not said
  so yet, count too); `sent`, the requests admitted while no count runs (before the first answer, or since the count's
  window ended), which the first answer of a new window may not count yet; the counts `r`, `i`, `o`
  (requests, input and output tokens) of the requests admitted in the last 60 s; and `w:ID`, each such request's
  "input output" weights;
- `log` (sorted set): the ids of those requests, scored by when they were admitted.

`ADMIT` is the whole decision in one script: the block, then, under the agent's `RateLimits`, a sliding window of
60 s whose counts must each be under their limit for a request to go (so a window holds at most one request over a
limit, by that request's weight). All three counts move together or not at all. The script uses the server's clock,
so the workers' clocks never matter. `SETTLE` gives back the output tokens a request reserved (`max_tokens`) and did
not use. Why not the `limits` package: it takes one dimension at a time (no all-or-nothing step over requests, input
and output), its moving window keeps an entry per unit of weight (a token each), and it cannot give units back.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import redis
from redis.commands.core import Script

from agent.agents.rate_limits import WINDOW_SECONDS, RateLimits
from agent.loop.spend import BudgetExceeded
from agent.provider.rate_gate import Admission
from agent.provider.rate_headers import read_headers
from tasks.store import keys
from tasks.store.preflight import PREFLIGHT
from tasks.store.scripts import registered

log = logging.getLogger("baton.provider")

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: state, log. ARGV: rpm, ipm, opm (0: none), input weight, output weight, id, window ms.
# Returns {1} when admitted, else {0, ms to wait, the limit that says so}.
# With no limits of the agent's and nothing said by the endpoint (the common case) it admits without asking the
# clock: three commands an attempt (the read, and `sent` counted).
_ADMIT = """
local state, log = KEYS[1], KEYS[2]
local said = redis.call('HMGET', state, 'block', 'left', 'left_until')
local limits = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
if not said[1] and not said[2] and limits[1] + limits[2] + limits[3] == 0 then
  -- nothing said yet: what goes is counted for the first answer to weigh (OBSERVE), for a window at most
  if redis.call('HINCRBY', state, 'sent', 1) == 1 then redis.call('PEXPIRE', state, ARGV[7]) end
  return {1}
end
""" + _NOW + """
local block = tonumber(said[1] or '0')
if block > now then return {0, block - now, 'provider_limit'} end
local counting = said[2] and tonumber(said[3]) > now
if counting and tonumber(said[2]) <= 0 then return {0, tonumber(said[3]) - now, 'provider_limit'} end
local function counted()
  if counting then redis.call('HINCRBY', state, 'left', -1) else redis.call('HINCRBY', state, 'sent', 1) end
end
if limits[1] + limits[2] + limits[3] == 0 then
  counted()
  return {1}
end
local window = tonumber(ARGV[7])
local function weights(id)
  local w = redis.call('HGET', state, 'w:' .. id)
  if not w then return 0, 0 end
  local i, o = string.match(w, '(%d+) (%d+)')
  return tonumber(i), tonumber(o)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', now - window)) do
  local i, o = weights(id)
  redis.call('HINCRBY', state, 'r', -1)
  redis.call('HINCRBY', state, 'i', -i)
  redis.call('HINCRBY', state, 'o', -o)
  redis.call('HDEL', state, 'w:' .. id)
end
redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
local sums = redis.call('HMGET', state, 'r', 'i', 'o')
local names = {'requests_per_minute', 'input_tokens_per_minute', 'output_tokens_per_minute'}
local wait, why = 0, ''
for d = 1, 3 do
  local sum = tonumber(sums[d] or '0')
  if limits[d] > 0 and sum >= limits[d] then
    -- the time the oldest requests leave the window enough for this count to be under its limit again
    local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
    for k = 1, #entries, 2 do
      local i, o = weights(entries[k])
      sum = sum - ({1, i, o})[d]
      if sum < limits[d] then
        local left = tonumber(entries[k + 1]) + window - now
        if left > wait then wait, why = left, names[d] end
        break
      end
    end
  end
end
if wait > 0 then return {0, wait, why} end
local id, i, o = ARGV[6], tonumber(ARGV[4]), tonumber(ARGV[5])
counted()
redis.call('ZADD', log, now, id)
redis.call('HSET', state, 'w:' .. id, i .. ' ' .. o)
redis.call('HINCRBY', state, 'r', 1)
redis.call('HINCRBY', state, 'i', i)
redis.call('HINCRBY', state, 'o', o)
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < window + 1000 then redis.call('PEXPIRE', key, window + 1000) end
end
return {1}
"""

# KEYS: state. ARGV: id, output tokens used.
_SETTLE = """
local w = redis.call('HGET', KEYS[1], 'w:' .. ARGV[1])
if not w then return 0 end
local i, o = string.match(w, '(%d+) (%d+)')
local used = math.min(tonumber(o), tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'o', used - tonumber(o))
redis.call('HSET', KEYS[1], 'w:' .. ARGV[1], i .. ' ' .. used)
return tonumber(o) - used
"""

# KEYS: state. ARGV: ms from now before which nobody sends (0: none; a later block already there is kept), the
# requests left (-1: not said), ms to their reset, and the requests a window holds (-1: not said). The fleet's own
# count of what is left goes on while the provider's answers speak of the same window (its reset within a second of
# the one counted: a bucket's reset creeps on with each request); a reset later than that is a new window, whose
# count replaces it. The first answer of a new window counts the requests that reached the provider before it, not
# those sent with it and still on their way (a fleet's waiting workers all go when a window ends): of a limit said,
# what is left is at most the limit less every request admitted since the last window ended (`sent`).
_OBSERVE = _NOW + """
local wait, left, reset, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl = wait
if wait > 0 and now + wait > tonumber(redis.call('HGET', KEYS[1], 'block') or '0') then
  redis.call('HSET', KEYS[1], 'block', now + wait)
end
if left >= 0 and reset > 0 then  -- a window already over (a late answer of it) says nothing of the next one
  local counted = redis.call('HMGET', KEYS[1], 'left', 'left_until', 'sent')
  local until_ = now + reset
  if counted[1] and tonumber(counted[2]) > now and until_ < tonumber(counted[2]) + 1000 then
    left = math.min(left, tonumber(counted[1]))
    until_ = math.max(until_, tonumber(counted[2]))
  elseif limit >= 0 and counted[3] then
    left = math.min(left, limit - tonumber(counted[3]))
  end
  redis.call('HSET', KEYS[1], 'left', left, 'left_until', until_)
  redis.call('HDEL', KEYS[1], 'sent')
  ttl = math.max(ttl, until_ - now)
end
if redis.call('PTTL', KEYS[1]) < ttl + 1000 then redis.call('PEXPIRE', KEYS[1], ttl + 1000) end
return 1
"""


def endpoint_tag(identity: str, model: str) -> str:
    """The endpoint's name in keys: a hash of its identity (which holds a hash of the key, never the key) and model."""
    return hashlib.sha256(f"{identity}|{model}".encode()).hexdigest()[:20]


class RedisGate:
    """The `Gate` of one endpoint (`identity`: agent/provider/rate_gate.py's `endpoint_identity`), per model."""

    def __init__(self, client: redis.Redis, identity: str, *, window: float = WINDOW_SECONDS) -> None:
        self._client, self._identity = client, identity
        self._window_ms = round(window * 1000)  # a minute; shorter only in unit tests
        self._admit = registered(client, _ADMIT)
        self._settle = registered(client, _SETTLE)
        self._observe = registered(client, _OBSERVE)
        self._tags: dict[str, str] = {}

    def _keys(self, model: str) -> tuple[str, str]:
        tag = self._tags.get(model)
        if tag is None:
            tag = self._tags[model] = endpoint_tag(self._identity, model)
        return keys.rate_state(tag), keys.rate_log(tag)

    def admit(self, model: str, limits: RateLimits | None, reservation: str, input_tokens: int,
              output_tokens: int) -> Admission:
        """One script: admitted now, or how long until it could be (see the module)."""
        state, entries = self._keys(model)
        asked = PREFLIGHT.admitted(state)  # the take's round trip may have asked for the first attempt already
        if asked is not None and limits is None:
            return _admission(asked)
        args: list[int | str] = [*(limits.as_args() if limits is not None else [0, 0, 0]), input_tokens,
                                 output_tokens, reservation, self._window_ms]
        try:
            # With the attempt's budget reservation, when one waits on this thread: one round trip for both.
            reply = PREFLIGHT.run(self._client, self._admit, [state, entries], args)
        except BudgetExceeded:
            if limits is not None and limits.output_tokens_per_minute is not None:
                self.settle(model, reservation, 0)  # admitted or not, nothing goes: its output tokens back
            raise
        return _admission(reply)

    def ahead(self, model: str, output_tokens: int) -> tuple[str, Script, list[str], list[Any]]:
        """An attempt's admission under no limits of its agent's, for the take's round trip to ask before the first
        model call (tasks/store/ahead.py): the endpoint's state key it counts on, and the script call."""
        state, entries = self._keys(model)
        args: list[Any] = [0, 0, 0, 0, output_tokens, uuid.uuid4().hex, self._window_ms]
        return state, self._admit, [state, entries], args

    def settle(self, model: str, reservation: str, output_tokens: int) -> None:
        self._settle(keys=[self._keys(model)[0]], args=[reservation, max(0, output_tokens)])

    def observe(self, model: str, headers: Mapping[str, str]) -> None:
        """What an answer's headers say, shared: a wait they ask for blocks the endpoint for every worker."""
        said = read_headers(headers, now=time.time())
        if said.wait <= 0 and said.requests_left is None:
            return
        left = said.requests_left if said.requests_left is not None else -1
        reset_ms = round((said.requests_reset or 0.0) * 1000)
        limit = said.requests_limit if said.requests_limit is not None else -1
        try:
            self._observe(keys=[self._keys(model)[0]], args=[round(said.wait * 1000), left, reset_ms, limit])
        except redis.RedisError:  # telling the fleet is worth a try, never worth failing the answer
            log.warning("could not share what a provider said of its rate limits", exc_info=True)
            return
        if said.wait <= 0:
            return
        log.info("endpoint %s model %s: no request for %.1fs (%s)", self._identity.split("|")[0], model, said.wait,
                 "retry-after" if said.retry_after else f"{said.exhausted_limit} at 0")


def _admission(reply: Any) -> Admission:
    """The ADMIT script's reply as the gate's answer."""
    if int(reply[0]) == 1:
        return Admission(True)
    why = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
    return Admission(False, int(reply[1]) / 1000, why)
