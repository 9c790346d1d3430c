"""Retention: the sweep deletes chats and runs idle for longer than `BATON_RETENTION`, and those deleted with
`stop=True` once they have settled.

Candidates come from the listing indexes (`keys.CHATS_BY_LAST` / `RUNS_BY_LAST`, scored by the last message sent
or the run's start), oldest first, a bounded batch per shard and sweep, so a sweep's work does not grow with the
store. The index is not the whole truth about activity: a turn that ran for an hour after its message, or a
failed run retried, was active later than its score says. So a candidate is deleted only when its last record's
`updated_at` is past the cutoff too; otherwise its score moves up to that time (ZADD XX: never re-adding one
deleted meanwhile) and it waits for its turn. The deletion is `tasks/store/deletion.py`'s one script, which
refuses a unit queued, running or waiting, atomically: whatever the sweep read, a busy unit is never deleted.
"""

from __future__ import annotations

import json
import logging
import time

import redis

from tasks.store import deletion, indexes, keys
from tasks.store.replies import text_or_none

log = logging.getLogger("baton.retention")

BATCH = 50  # candidates per shard and round
# A sweep runs rounds while they delete something, for at most this long: one worker keeps up with a steady load
# (a soak at 30 turns/s fell behind with one round per sweep), and a backlog (retention turned on over a large
# store) drains over several sweeps without holding the sweep's other work back.
BUDGET_SECONDS = 0.5


def decide(score: float, last_updated: float | None, cutoff: float) -> float | None:
    """None: delete it (idle since before `cutoff`); else the activity time to re-score it with."""
    latest = max(score, last_updated or 0.0)
    return None if latest < cutoff else latest


def _last_updated(client: redis.Redis, owner_id: str) -> float | None:
    kind, _, ident = owner_id.partition(":")
    unit = ident if kind == "run" else text_or_none(client.lindex(keys.turns(owner_id), -1))
    if unit is None:
        return None
    raw = text_or_none(client.hget(keys.record(owner_id, unit), "updated_at"))
    return float(json.loads(raw)) if raw else None


def expire_idle(
    client: redis.Redis, retention: float, now: float, *, limit: int = BATCH, budget: float = BUDGET_SECONDS
) -> list[str]:
    """Delete what has been idle for `retention` seconds (0: nothing); returns the owners deleted."""
    if retention <= 0:
        return []
    gone: list[str] = []
    until = time.monotonic() + budget
    while True:
        deleted = _expire_round(client, now - retention, limit)
        gone += deleted
        if not deleted or time.monotonic() >= until:
            return gone


def _expire_round(client: redis.Redis, cutoff: float, limit: int) -> list[str]:
    gone: list[str] = []
    for name in (keys.CHATS_BY_LAST, keys.RUNS_BY_LAST):
        for shard, owner_id, score in indexes.due(client, name, cutoff, limit=limit):
            later = decide(float(score), _last_updated(client, owner_id), cutoff)
            if later is not None:
                client.zadd(shard, {owner_id: later}, xx=True)
                continue
            done = deletion.delete(client, owner_id)
            if done.busy is not None:
                continue  # queued, running or waiting: kept; looked at again next sweep
            gone.append(owner_id)
    return gone


def delete_doomed(client: redis.Redis, now: float, *, limit: int = BATCH) -> list[str]:
    """Delete the units `delete(stop=True)` left stopping (their caller stopped waiting) once they have settled;
    one still busy is asked to stop again (a chat's next queued turn, started after the stopped one settled)."""
    gone: list[str] = []
    for _, owner_id, _ in indexes.due(client, keys.DOOMED, now, limit=limit):
        done = deletion.delete(client, owner_id)
        if done.busy is None:
            gone.append(owner_id)
        elif not client.exists(keys.stop(owner_id)):
            client.set(keys.stop(owner_id), done.busy, ex=24 * 3600)
    return gone
