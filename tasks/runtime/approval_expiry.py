"""Expiring approvals: a call nobody decided within `BATON_APPROVAL_TTL` is denied by the sweep.

No task sleeps on a waiting call (the unit holds no worker); the park records when each call expires in
`keys.APPROVAL_DUE` (the unit's shard of it), and every worker's sweep denies what is due with the reason
"approval expired", through the same script as a person's decision, so a decision and an expiry racing each other
leave exactly one.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import redis

from tasks.store import indexes, keys
from tasks.store.approvals import decide
from tasks.store.reads import load_record
from tasks.store.records import UnitRecord

EXPIRED_REASON = "approval expired"


def expire_approvals(
    client: redis.Redis, now: float, publish: Callable[[UnitRecord], None], *, limit: int = 50
) -> list[str]:
    """Deny the waiting calls whose time is up; `publish` starts a unit whose last call that settled.

    Returns the tool_use_ids denied here.
    """
    denied: list[str] = []
    for shard, member, _ in indexes.due(client, keys.APPROVAL_DUE, now, limit=limit):
        owner_id, unit_id, tool_use_id = json.loads(member)
        rec = load_record(client, owner_id, unit_id)
        if rec is None:
            client.zrem(shard, member)  # the unit is gone: nothing to expire
            continue
        done = decide(client, rec, tool_use_id, "denied", reason=EXPIRED_REASON, by="baton", expired=True, now=now)
        if done.outcome != "decided":
            client.zrem(shard, member)  # decided meanwhile: the first decision stands
            continue
        denied.append(tool_use_id)
        if done.resume:
            publish(rec)
    return denied
