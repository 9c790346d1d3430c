"""Every Redis key Baton uses, in one place.

Keys of one chat or run share one hash tag, so each fenced Lua write that touches several of them stays one
atomic script on a Redis Cluster. On a plain Redis (or Sentinel) the tag is the owner, `{chat:ID}`, and the
indexes that span units (`ACTIVE`, `PENDING`, `RUNS`, `APPROVAL_DUE`, `DELTA_TRIM`) are one key each.

On a Redis Cluster (`use_cluster`) an index is `SHARDS` keys, and a unit's keys carry its shard's tag instead of
its own: `baton:{TAG}:chat:ID:...`. A unit and its shard of every index then share one slot, so the index is
still updated inside the unit's fenced write (the enqueue that makes a unit pending, the heartbeat that marks it
active, the park that schedules its approval's expiry): no write of a unit can land without its index entry,
and the sweeps keep exactly the guarantees they have on one Redis. Each sweep visits every shard (`shards`).
Shard k's tag hashes to a slot in the k-th of `SHARDS` equal slot ranges, so the shards spread evenly over
masters that own contiguous ranges (as `redis-cli --cluster create` and `rebalance` assign them).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import Literal, TypeVar

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

PREFIX = "baton"
ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")  # \Z: `$` would let "id\n" through

ACTIVE = f"{PREFIX}:active"  # sorted set: owner -> last heartbeat (unix s); swept for lost workers
PENDING = f"{PREFIX}:pending"  # sorted set: owner with unfinished work -> last enqueued/checked; lost-message sweep
RUNS = f"{PREFIX}:runs"  # set of run ids: written by releases before listing (tasks/store/listing.py); only removed now
# Listing and retention (tasks/store/listing.py): sorted sets, owner -> last activity (unix s), newest first.
CHATS_BY_LAST = f"{PREFIX}:chats:last"
RUNS_BY_LAST = f"{PREFIX}:runs:last"
DOOMED = f"{PREFIX}:doomed"  # sorted set: owner deleted with stop=True -> when asked; the sweep deletes it once settled
APPROVAL_DUE = f"{PREFIX}:approvals:due"  # sorted set: [owner, unit, tool_use_id] -> when it expires (unix s)
DELTA_TRIM = f"{PREFIX}:deltas:trim"  # sorted set: [owner, unit, since ms] -> when its live text is deleted
SCRIPTED_COUNTS = f"{PREFIX}:scripted"  # hash: the scripted provider's fault counters
# Agents (tasks/store/agents.py): what workers serve, and every definition a unit may have recorded. Fleet-wide and
# small (a few entries per agent and worker), read rarely: one key each, on one node of a cluster.
AGENTS = f"{PREFIX}:agents"  # hash: "NAME\tHOSTNAME" -> {summary, default, at} (JSON), published at every sweep
AGENT_DEFS = f"{PREFIX}:agents:defs"  # hash: version -> the resolved definition (JSON), for units pinned to it



def rate_state(endpoint: str) -> str:
    """Hash: an endpoint's shared rate-limit state (tasks/store/rate_limits.py); `endpoint` is a hash, its own tag."""
    return f"{PREFIX}:{{rate:{endpoint}}}:state"


def rate_log(endpoint: str) -> str:
    """Sorted set: the requests an endpoint admitted in the last 60 s, beside `rate_state` in its slot."""
    return f"{PREFIX}:{{rate:{endpoint}}}:log"


# Fixed for the life of a store: another count moves every unit's keys. 64 keeps a cluster of up to 64 masters
# balanced (one shard's slot is the smallest piece a master can hold), and a sweep's visit 5 x 64 cheap reads.
SHARDS = 64
INDEXES = (ACTIVE, PENDING, RUNS, APPROVAL_DUE, DELTA_TRIM, CHATS_BY_LAST, RUNS_BY_LAST, DOOMED)
_cluster = [False]


def use_cluster(on: bool) -> None:
    """Lay keys out for a Redis Cluster (sharded indexes) or for one Redis; `tasks/store/connect.py` sets it as it
    builds the process's store clients, so every key of a process follows its store."""
    _cluster[0] = on


def clustered() -> bool:
    return _cluster[0]


def shard(owner_id: str) -> int:
    """Which of `SHARDS` an owner belongs to (stable across processes and releases: CRC-32, not `hash`)."""
    return zlib.crc32(owner_id.encode()) % SHARDS


@lru_cache(maxsize=SHARDS)
def shard_tag(index: int) -> str:
    """The hash tag of shard `index`: the first `index.n` whose slot falls in the index-th slot range."""
    width = REDIS_CLUSTER_HASH_SLOTS // SHARDS
    n = 0
    while key_slot(f"{index}.{n}".encode()) // width != index:
        n += 1
    return f"{index}.{n}"


def _sharded(name: str, index: int) -> str:
    return f"{PREFIX}:{{{shard_tag(index)}}}{name.removeprefix(PREFIX)}"


def index_key(name: str, owner_id: str) -> str:
    """The key of index `name` (one of `INDEXES`) that holds `owner_id`'s entries."""
    return _sharded(name, shard(owner_id)) if _cluster[0] else name


def shards(name: str) -> list[str]:
    """Every key of index `name`: what a sweep visits (one on a plain Redis)."""
    return [_sharded(name, i) for i in range(SHARDS)] if _cluster[0] else [name]


def active(owner_id: str) -> str:
    return index_key(ACTIVE, owner_id)


def pending(owner_id: str) -> str:
    return index_key(PENDING, owner_id)


def runs(owner_id: str) -> str:
    return index_key(RUNS, owner_id)


def approval_due(owner_id: str) -> str:
    return index_key(APPROVAL_DUE, owner_id)


def delta_trim(owner_id: str) -> str:
    return index_key(DELTA_TRIM, owner_id)


def by_last(owner_id: str) -> str:
    """The listing index (owner -> last activity) of the owner's kind, on its shard."""
    return index_key(CHATS_BY_LAST if owner_id.startswith("chat:") else RUNS_BY_LAST, owner_id)


def doomed(owner_id: str) -> str:
    return index_key(DOOMED, owner_id)


def _user_index(kind: str, user: str) -> str:
    return f"{PREFIX}:user:{user}:{kind}s"


def user_index(user: str, owner_id: str) -> str:
    """One person's listing index of the owner's kind (owner -> last activity). On a cluster it is sharded like
    the global ones, by the owner: the entry then shares the unit's slot and is written in the unit's own script."""
    name = _user_index(owner_id.partition(":")[0], user)
    return _sharded(name, shard(owner_id)) if _cluster[0] else name


def user_shards(kind: str, user: str) -> list[str]:
    """Every key of one person's listing index of `kind` ("chat" or "run"): what a listing reads."""
    return shards(_user_index(kind, user))


def owner(kind: str, ident: str) -> str:
    """`chat:ID` or `run:ID`: the unit that owns a transcript, events and a lease."""
    return f"{kind}:{ident}"


# Every key of one chat or run is built by a function below registered here, with what it is keyed by beyond the
# owner: nothing ("owner"), a unit id (a turn's or the run's: "unit"), or a unit id and a generation ("generation").
# Deleting a unit (tasks/store/deletion.py) enumerates this registry, and a unit test fails for a function of this
# module that builds a key under `base` without being registered: a new key kind cannot escape deletion.
Scope = Literal["owner", "unit", "generation"]
UNIT_KEYS: dict[str, tuple[Scope, Callable[..., str]]] = {}
F = TypeVar("F", bound=Callable[..., str])


def unit_key(scope: Scope) -> Callable[[F], F]:
    def register(fn: F) -> F:
        UNIT_KEYS[fn.__name__] = (scope, fn)
        return fn

    return register


def base(owner_id: str) -> str:
    if _cluster[0]:
        return f"{PREFIX}:{{{shard_tag(shard(owner_id))}}}:{owner_id}"
    return f"{PREFIX}:{{{owner_id}}}"


@unit_key("owner")
def settled(owner_id: str) -> str:
    """Stream: one entry per unit of this owner that ended or parked for approval (`tasks/store/settled.py`)."""
    return f"{base(owner_id)}:settled"


@unit_key("owner")
def transcript(owner_id: str) -> str:
    return f"{base(owner_id)}:transcript"


@unit_key("owner")
def events(owner_id: str) -> str:
    return f"{base(owner_id)}:events"


@unit_key("unit")
def record(owner_id: str, unit_id: str) -> str:
    """A chat turn's record (unit = turn id) or a run's record (unit = run id)."""
    return f"{base(owner_id)}:rec:{unit_id}"


@unit_key("owner")
def queue(owner_id: str) -> str:
    """A chat's FIFO of turn ids not yet finished: one turn runs at a time, in order."""
    return f"{base(owner_id)}:queue"


@unit_key("owner")
def turns(owner_id: str) -> str:
    """A chat's turn ids in the order they were sent."""
    return f"{base(owner_id)}:turns"


@unit_key("owner")
def lease(owner_id: str) -> str:
    return f"{base(owner_id)}:lease"


@unit_key("owner")
def files(owner_id: str) -> str:
    """Hash: SHA-256 -> base64 of a file the chat's messages carry (tasks/store/files.py), stored once per chat."""
    return f"{base(owner_id)}:files"


@unit_key("generation")
def journal(owner_id: str, unit_id: str, generation: int) -> str:
    return f"{base(owner_id)}:journal:{unit_id}:{generation}"


@unit_key("generation")
def live(owner_id: str, unit_id: str, generation: int) -> str:
    """Hash: message id -> the attempts of that step that streamed text, and those discarded since."""
    return f"{base(owner_id)}:live:{unit_id}:{generation}"


@unit_key("unit")
def approvals(owner_id: str, unit_id: str) -> str:
    """Hash: tool_use_id -> the decision on a call that waited for approval (written once, never changed)."""
    return f"{base(owner_id)}:approvals:{unit_id}"


@unit_key("owner")
def round_slot(owner_id: str) -> str:
    return f"{base(owner_id)}:round"


@unit_key("owner")
def stop(owner_id: str) -> str:
    """The owner's stop: its value names the unit to stop (`stop_names`)."""
    return f"{base(owner_id)}:stop"


STOP_ALL = "*"  # a stop key's value that stops whichever of the owner's units reads it


def stop_names(value: str | None, unit_id: str) -> bool:
    """Whether a stop key's value, as read, asks this unit to stop: its id, or `STOP_ALL`."""
    return value is not None and value in (unit_id, STOP_ALL)


@unit_key("owner")
def recover(owner_id: str) -> str:
    """A short lock so two sweepers never requeue the same lost unit twice."""
    return f"{base(owner_id)}:recover"


def drain(hostname: str, owner_id: str = "") -> str:
    """Set by a worker's main process when it starts shutting down; its pool children poll it. On a cluster each
    shard has its copy (`drains`), so the script that takes a unit reads the one on the unit's own slot."""
    if _cluster[0]:
        return f"{PREFIX}:{{{shard_tag(shard(owner_id))}}}:drain:{hostname}"
    return f"{PREFIX}:drain:{hostname}"


def drains(hostname: str) -> list[str]:
    """Every copy of `hostname`'s drain flag: what shutting down sets and starting clears (one on a plain Redis)."""
    if _cluster[0]:
        return [f"{PREFIX}:{{{shard_tag(i)}}}:drain:{hostname}" for i in range(SHARDS)]
    return [f"{PREFIX}:drain:{hostname}"]


# Budgets (tasks/store/budgets.py): every budget and every held reservation under one hash tag, so the script that
# reserves an attempt against all of a unit's scopes (its user's, chat's or run's, agent's, the fleet's) is one
# atomic script on one slot of a cluster; why one slot and not the unit's, see tasks/store/budgets.py.
BUDGETS_TAG = "{budgets}"


def budget(scope: str) -> str:
    """Hash: one budget (its limits, period, epoch, and what is spent and reserved in its window)."""
    return f"{PREFIX}:{BUDGETS_TAG}:budget:{scope}"


BUDGET_HOLDERS = f"{PREFIX}:{BUDGETS_TAG}:holders"  # set: the held hashes that hold something (the sweep's list)


def budget_held(owner_id: str) -> str:
    """Hash: reservation id -> what it holds (JSON), for each attempt of the owner's units in flight."""
    return f"{PREFIX}:{BUDGETS_TAG}:held:{owner_id}"


# A Redis Cluster's budgets' marks (tasks/store/budget_marks.py): one copy on every shard, set before any budget is
# and never removed, so a unit's own slot says whether a budget may exist anywhere. None on one Redis ("").
BUDGETS_MARKED = f"{PREFIX}:{BUDGETS_TAG}:marked"  # string: every shard's mark was set
_BUDGETS_MARK = f"{PREFIX}:budgets:marked"  # laid out on each shard as an index is (`_sharded`)


def budgets_mark(owner_id: str) -> str:
    """The budgets' mark on `owner_id`'s shard ("" on one Redis, where the budget keys are asked in the same trip)."""
    return _sharded(_BUDGETS_MARK, shard(owner_id)) if _cluster[0] else ""


def budgets_marks() -> list[str]:
    """Every shard's budgets' mark (none on one Redis)."""
    return [_sharded(_BUDGETS_MARK, i) for i in range(SHARDS)] if _cluster[0] else []
