"""Every Redis key Baton uses, in one place.

Keys of one chat or run share the hash tag `{chat:ID}` / `{run:ID}`, so a Redis Cluster keeps them
on one slot and the fenced Lua writes that touch several of them stay legal.
"""

from __future__ import annotations

import re

PREFIX = "baton"
ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")  # \Z: `$` would let "id\n" through

ACTIVE = f"{PREFIX}:active"  # sorted set: owner -> last heartbeat (unix s); swept for lost workers
PENDING = f"{PREFIX}:pending"  # sorted set: owner with unfinished work -> last enqueued/checked; lost-message sweep
RUNS = f"{PREFIX}:runs"  # set of run ids, for listing
APPROVAL_DUE = f"{PREFIX}:approvals:due"  # sorted set: [owner, unit, tool_use_id] -> when it expires (unix s)
DELTA_TRIM = f"{PREFIX}:deltas:trim"  # sorted set: [owner, unit, since ms] -> when its live text is deleted
SCRIPTED_COUNTS = f"{PREFIX}:scripted"  # hash: the scripted provider's fault counters


def owner(kind: str, ident: str) -> str:
    """`chat:ID` or `run:ID`: the unit that owns a transcript, events and a lease."""
    return f"{kind}:{ident}"


def base(owner_id: str) -> str:
    return f"{PREFIX}:{{{owner_id}}}"


def settled(owner_id: str) -> str:
    """Stream: one entry per unit of this owner that ended or parked for approval (`tasks/store/settled.py`)."""
    return f"{base(owner_id)}:settled"


def transcript(owner_id: str) -> str:
    return f"{base(owner_id)}:transcript"


def events(owner_id: str) -> str:
    return f"{base(owner_id)}:events"


def record(owner_id: str, unit_id: str) -> str:
    """A chat turn's record (unit = turn id) or a run's record (unit = run id)."""
    return f"{base(owner_id)}:rec:{unit_id}"


def queue(owner_id: str) -> str:
    """A chat's FIFO of turn ids not yet finished: one turn runs at a time, in order."""
    return f"{base(owner_id)}:queue"


def turns(owner_id: str) -> str:
    """A chat's turn ids in the order they were sent."""
    return f"{base(owner_id)}:turns"


def lease(owner_id: str) -> str:
    return f"{base(owner_id)}:lease"


def journal(owner_id: str, unit_id: str, generation: int) -> str:
    return f"{base(owner_id)}:journal:{unit_id}:{generation}"


def live(owner_id: str, unit_id: str, generation: int) -> str:
    """Hash: message id -> the attempts of that step that streamed text, and those discarded since."""
    return f"{base(owner_id)}:live:{unit_id}:{generation}"


def approvals(owner_id: str, unit_id: str) -> str:
    """Hash: tool_use_id -> the decision on a call that waited for approval (written once, never changed)."""
    return f"{base(owner_id)}:approvals:{unit_id}"


def round_slot(owner_id: str) -> str:
    return f"{base(owner_id)}:round"


def stop(owner_id: str) -> str:
    return f"{base(owner_id)}:stop"


def recover(owner_id: str) -> str:
    """A short lock so two sweepers never requeue the same lost unit twice."""
    return f"{base(owner_id)}:recover"


def drain(hostname: str) -> str:
    """Set by a worker's main process when it starts shutting down; its pool children poll it."""
    return f"{PREFIX}:drain:{hostname}"
