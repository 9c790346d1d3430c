"""The settled signal: one short stream entry per unit that ended or parked for approval, for callers that wait.

A caller waiting for a turn's or run's end (`Client.wait`) used to block on the owner's event stream, so every
event woke it (the start, each tool call and result, each flush of live text: six or so wake-ups and round trips
per chat turn, for the one that mattered), and a unit parking for approval wrote no event at all after the
`tool.approval_requested` it had journaled before parking, so the waiter saw the park only after a quiet second.
Every write that ends a unit (a settle, a withdrawal, the sweep giving up on it) or parks it adds `{"u": unit id}`
here in the same atomic write, so a waiter reads the record when, and only when, one of the owner's units
settled. The stream is capped: a waiter reads its tail id before the record, and only entries after it matter.
"""

from __future__ import annotations

MAXLEN = 64
FIELD = "u"


def xadd_args(unit_id: str) -> list[str]:
    """The arguments of the XADD that follow the stream's key (a fenced batch's, or a script's)."""
    return ["MAXLEN", "~", str(MAXLEN), "*", FIELD, unit_id]
