"""Fenced writes: a batch of Redis commands applied only while this execution holds the lease.

One EVALSHA per batch, so a journaled step, its events and its record update are one round trip,
and a stale holder (one whose lease expired and was taken over) writes nothing at all.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.commands.core import Script

from agent.errors import BatonError, LeaseLost
from tasks.store.compaction import compacted
from tasks.store.direct import Call, SentAhead
from tasks.store.json_values import dumps
from tasks.store.scripts import registered, with_script

# Runs a batch's ops after the script's own checks, read from ARGV[first] on, each as command, key index, number of
# arguments, arguments (flat, not one JSON document: decoding one cost the server ~10 µs a KB, and a batch's
# arguments are JSON already, so they were escaped twice): an op's key is KEYS[index + base]. One command is
# Baton's own: DELIFEQ key value... deletes the key if it holds one of the values (a stop flag naming this unit), so
# that check costs no round trip of its own. A command written `=COMMAND` is a read whose reply is appended to
# `out`, so a read that must follow the write costs no round trip of its own either. With `fills` (JSON literal of
# a `fill` marker -> JSON value, or a function giving it when first needed), every occurrence of a marker in an
# argument is replaced by its value before the command runs. `pushed` keeps each list's length after the batch's
# last RPUSH to it (its reply), for a fill that needs it without an LLEN of its own.
RUN_OPS = """
local pushed = {}
local function filled(arg, fills)
  for mark, value in pairs(fills) do
    local at = string.find(arg, mark, 1, true)
    while at do
      if type(value) == 'function' then
        value = value()
        fills[mark] = value
      end
      arg = string.sub(arg, 1, at - 1) .. value .. string.sub(arg, at + #mark)
      at = string.find(arg, mark, at + #value, true)
    end
  end
  return arg
end
local function call(command, key, args, from, to)
  if args then return redis.call(command, key, unpack(args)) end
  return redis.call(command, key, unpack(ARGV, from, to))
end
local function run_ops(first, base, out, fills)
  local at, last = first, #ARGV
  while at <= last do
    local command, key, count = ARGV[at], KEYS[tonumber(ARGV[at + 1]) + base], tonumber(ARGV[at + 2])
    local from, to = at + 3, at + 2 + count
    at = to + 1
    -- The arguments stay in ARGV (`call` unpacks them from there) unless fills rewrite them: a table per op was a
    -- third of a settle's time in Lua.
    local args = nil
    if fills then
      args = {}
      for i = from, to do args[#args + 1] = filled(ARGV[i], fills) end
    end
    if command == 'DELIFEQ' then
      local value = redis.call('GET', key)
      for i = from, to do
        if value == (args and args[i - from + 1] or ARGV[i]) then
          redis.call('DEL', key)
          break
        end
      end
    elseif string.byte(command) == 61 then  -- '=': a read, whose reply is returned
      out[#out + 1] = call(string.sub(command, 2), key, args, from, to)
    elseif command == 'RPUSH' then
      pushed[key] = call(command, key, args, from, to)
    else
      call(command, key, args, from, to)
    end
  end
  return out
end
"""

# KEYS[1] is the lease; ARGV[1] the holder's token; ARGV[2] a replication id the master must still have ("": no
# such check); the batch's ops from ARGV[3] on. The reply: 0 (not our lease), 2 (the master's replication id is
# another: it failed over, and nothing was written), or 1 followed by the replies of the batch's reads.
_FENCED = RUN_OPS + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] ~= '' then
  local now = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
  if now and now ~= ARGV[2] then return 2 end
end
return run_ops(3, 0, {1}, nil)
"""

EVENTS_MAXLEN = 10_000

def fill(name: str) -> str:
    """A value left for the script that writes the batch to fill in, where Python cannot know it yet (the
    record's text, read in the same script). Put it where the value goes: JSON encoding turns it into a
    literal (`fill_mark`) the script replaces by the value's JSON, so the format stays the Python encoder's."""
    return f"\x00baton:{name}\x00"


def fill_mark(name: str) -> str:
    """How `fill(name)` reads once JSON-encoded (the same for `json.dumps` and pydantic): what the script replaces."""
    return json.dumps(fill(name))


class Batch:
    """Commands collected for one fenced write; keys are deduplicated into KEYS."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.ops: list[list[Any]] = []

    def _key(self, key: str) -> int:
        if key not in self.keys:
            self.keys.append(key)
        return self.keys.index(key) + 2  # KEYS[1] is the lease

    def add(self, command: str, key: str, *args: Any) -> Batch:
        self.ops.append([command, self._key(key), *(a if isinstance(a, str) else dumps(a) for a in args)])
        return self

    def hset(self, key: str, mapping: dict[str, Any], *, raw: bool = False) -> Batch:
        """Record fields are JSON-encoded (`raw=True` stores already-serialized strings as they are)."""
        flat: list[Any] = []
        for field, value in mapping.items():
            flat += [field, value if raw else dumps(value)]
        return self.add("HSET", key, *flat)

    def read(self, command: str, key: str, *args: Any) -> Batch:
        """A read run after the commands before it; `Fence.commit` returns its reply (a nil one as None)."""
        return self.add(f"={command}", key, *args)

    def delete_if(self, key: str, *values: str) -> Batch:
        """Delete `key` if it holds one of `values` (checked inside the fenced write)."""
        return self.add("DELIFEQ", key, *values)

    def xadd(self, key: str, event_json: str) -> Batch:
        return self.add("XADD", key, "MAXLEN", "~", str(EVENTS_MAXLEN), "*", "e", event_json)

    def extend(self, other: Batch) -> Batch:
        """Append another batch's commands after this one's, in order."""
        for op in other.ops:
            self.ops.append([op[0], self._key(other.keys[op[1] - 2]), *op[2:]])
        return self

    def __bool__(self) -> bool:
        return bool(self.ops)

    def ops_args(self, *, compact: bool = True) -> list[str]:
        """The ops as `RUN_OPS` takes them, the script's last arguments: pass `keys` after the script's own n keys,
        and base n - 1. Writes the batch itself overwrites are left out (`compacted`) unless `compact` is off: a
        batch with fills, whose values are read when an op first needs them, keeps every op where it was."""
        flat: list[str] = []
        for command, key, *args in compacted(self.ops) if compact else self.ops:
            flat += [command, str(key), str(len(args)), *args]
        return flat


class ReplicationUnconfirmed(BatonError):
    """A write the store's replicas did not confirm in time: a failover now could lose it.

    Transient: the replica catches up, or the master drops it (`repl-timeout`) and has none left to wait for.
    `step_id`, `name` and `waits` say which write tool waits and how many times its entry went unconfirmed.
    """

    failure_class = "infra_transient"

    def __init__(self, message: str, *, step_id: str = "", name: str = "", waits: int = 0) -> None:
        super().__init__(message)
        self.step_id = step_id
        self.name = name
        self.waits = waits


class FailedOver(BatonError):
    """The master's replication history is not the one the write was guarded with: a failover came in between,
    and the write was not made (`Fence.commit`'s `unless_failed_over`)."""

    failure_class = "infra_transient"


class Fence:
    """Writes batches under one lease token; raises `LeaseLost` when the lease is no longer ours.

    `prelude`, when set, supplies commands that go ahead of every batch in the same write (buffered live
    text): whatever was streamed before an event is then in the stream before it, even across threads.
    """

    def __init__(self, client: redis.Redis, lease_key: str, token: str) -> None:
        self._client = client
        self._lease_key = lease_key
        self._token = token
        self._script = registered(client, _FENCED)
        self._lock = threading.Lock()
        self._held: list[Batch] = []  # for the next commit, in order (`hold`)
        self._ahead_sent: SentAhead | None = None  # a write whose reply is read before the next (`send_ahead`)
        self.prelude: Callable[[], Batch] | None = None

    @property
    def lock(self) -> threading.Lock:
        """Held while one of this fence's writes is built and sent. A writer that sends several fences' writes in
        one pipeline (live text) takes it for each, so no commit of the fence comes between a batch it took from
        the prelude and that batch's write."""
        return self._lock

    def _call(self, batch: Batch, unless_failed_over: str | None = None) -> tuple[list[str], list[str]]:
        """The fenced script's keys and arguments for writing `batch` (see `_FENCED`)."""
        return [self._lease_key, *batch.keys], [self._token, unless_failed_over or "", *batch.ops_args()]

    def _ahead(self, *, held: bool) -> Batch:
        """What goes ahead of a write, the caller holding `lock`: the prelude (buffered live text) and, with `held`,
        the batches held for it (taken: they go with this write)."""
        ahead = self.prelude() if self.prelude is not None else Batch()
        if held:
            for batch in self._held:
                ahead.extend(batch)
            self._held = []
        return ahead

    def call(self, batch: Batch) -> Call:
        """`batch` as this fence's write, for the caller to send (tasks/store/direct.py), holding `lock`: the reply is
        falsy when the lease is not ours."""
        self._confirm_ahead()
        return Call.script(self._client, self._script, *self._call(batch))

    def hold(self, batch: Batch) -> None:
        """Write `batch` as the start of the next commit of commands (after the prelude, in the same atomic
        write), not on its own: for a write whose next one follows with no I/O between, or whose next round trip
        carries it (`riding`). A commit that fails ends the execution (a store error goes up, a lost lease stops
        it), so nothing held is sent twice."""
        if any(op[0].startswith("=") for op in batch.ops):
            raise ValueError("a held batch has no reads: their replies would go to the next commit's caller")
        with self._lock:
            self._held.append(batch)

    @contextmanager
    def riding(self, batch: Batch, reads: Batch) -> Iterator[tuple[Script, list[str], list[str]] | None]:
        """The write of `batch`, held (`hold`), for another call's round trip to carry (tasks/store/preflight.py):
        the script, keys and arguments of a commit of what is held, ahead of it the prelude as in every commit, and
        `reads` after it; None when `batch` rode a commit already. Built and sent under `lock`, so no commit comes
        between; `answered` reads the reply."""
        with self._lock:
            self._confirm_ahead()
            if not any(held is batch for held in self._held):
                yield None
                return
            yield self._script, *self._call(self._ahead(held=True).extend(reads))

    def riding_ahead(self, sent: SentAhead) -> None:
        """Inside `riding`: the write it yielded went out without waiting for its reply (`sent`), which the next write
        of this fence reads first, as it does a write sent ahead (`send_ahead`)."""
        self._ahead_sent = sent

    def answered(self, reply: Any) -> list[Any]:
        """The replies of a `riding` write's reads, or `LeaseLost` when it wrote nothing."""
        self._owned(reply)
        return list(reply[1:])

    def commit(
        self,
        batch: Batch,
        *,
        replicas: int = 0,
        timeout_ms: int = 0,
        via: redis.Redis | None = None,
        unless_failed_over: str | None = None,
    ) -> list[Any]:
        """Write the batch under the lease and return the replies of its reads (`Batch.read`), in order; with
        `replicas`, also wait (WAIT, on the same connection) until that many replicas have it, raising
        `ReplicationUnconfirmed` if they do not within `timeout_ms`. `via`: the client of the master that holds
        the batch's slot, on a cluster (`failover.master_of`), where a keyless WAIT would go to any node.
        `unless_failed_over`: the master's replication id as the execution read it; if the master that runs the write
        has another, nothing is written and `FailedOver` raised (what this commit took to send ahead of `batch`,
        held writes and buffered live text, is held for the next one)."""
        with self._lock:
            self._confirm_ahead()
            ahead = self._ahead(held=bool(batch))  # a flush of the prelude alone (live text) leaves them held
            if ahead:  # a copy: `ahead` alone is what a write that finds a failover keeps held
                batch = Batch().extend(ahead).extend(batch)
            if not batch:
                return []
            keys, args = self._call(batch, unless_failed_over)
            acked = replicas
            if not replicas:
                reply = self._script(keys=keys, args=args)
            else:
                waiting = ("WAIT", replicas, timeout_ms)  # on the write's connection: WAIT counts its writes
                reply, acked = with_script(via or self._client, self._script, keys, args, waiting)
            if reply == 2:
                self._held = [ahead] if ahead else []
                raise FailedOver(f"the master of {self._lease_key} failed over since the execution started")
        self._owned(reply)
        if replicas and int(acked) < replicas:
            raise ReplicationUnconfirmed(
                f"{acked} of {replicas} replicas confirmed the write within {timeout_ms} ms"
            )
        return list(reply[1:])

    def send_ahead(self, batch: Batch) -> None:
        """Write `batch` as `commit` does, its reply read later (tasks/store/direct.py): by the next write of
        this fence, whatever it is, which raises `LeaseLost` if this one found the lease lost. For a write whose
        next step may run before it is confirmed (a round of read tools). Where nothing can be sent ahead, a commit."""
        with self._lock:
            self._confirm_ahead()
            ahead = self._ahead(held=True)
            if ahead:
                batch = Batch().extend(ahead).extend(batch)
            keys, args = self._call(batch)
            self._ahead_sent = SentAhead.hold(self._client, self._script, keys, args)
            if self._ahead_sent is None:
                self._owned(self._script(keys=keys, args=args))

    def confirm_ahead(self) -> None:
        """Read the reply of a write sent ahead, if one is out (`LeaseLost` if it found the lease lost)."""
        with self._lock:
            self._confirm_ahead()

    def drop_ahead(self) -> None:
        """At the execution's end: a write still out is left unread (its connection closed, never reused)."""
        with self._lock:
            sent, self._ahead_sent = self._ahead_sent, None
        if sent is not None:
            sent.drop()

    def _confirm_ahead(self) -> None:
        sent, self._ahead_sent = self._ahead_sent, None
        if sent is not None:
            self._owned(sent.reply())

    def _owned(self, reply: Any) -> None:
        """A fenced write's reply: falsy when the lease was not ours, and nothing was written."""
        if not reply:
            raise LeaseLost(f"lease {self._lease_key} is held by another execution")
