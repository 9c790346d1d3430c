"""Withdrawing a unit whose task could not be published: it fails visibly instead of waiting for nobody.

On RabbitMQ nothing would ever publish it again (the lost-message sweep looks in Redis queues only), and on a
chat a queued turn nobody starts blocks every turn behind it. So when the client's publish fails, the unit it
had just queued is failed as `infra_transient`, retryable (`baton retry` publishes it anew), in one script that
acts only if the unit is still queued under that task id: a copy the broker did take after all, and already
started, is left alone (its worker owns the record now), and one still in flight finds a finished record and
is dropped.
"""

from __future__ import annotations

import json
import time

import redis

from agent.events import encode_event
from tasks.store import keys, settled
from tasks.store.fenced import EVENTS_MAXLEN
from tasks.store.records import Failure, UnitRecord

# KEYS: record, chat queue (a run's: any unused key), events, round slot, settled signal.
# ARGV: task id (JSON), failure (JSON), unit id, now, events maxlen, the failed event without a stored round, and
# with one, the settled signal's maxlen.
WITHDRAW = """
if redis.call('HGET', KEYS[1], 'status') ~= '"queued"' or redis.call('HGET', KEYS[1], 'task_id') ~= ARGV[1]
then return 0 end
redis.call('HSET', KEYS[1], 'status', '"failed"', 'failure', ARGV[2], 'waiting_reason', 'null', 'updated_at', ARGV[4])
redis.call('LREM', KEYS[2], 1, ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'e', ARGV[6 + redis.call('EXISTS', KEYS[4])])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[8], '*', 'u', ARGV[3])
return 1
"""


def withdraw_call(rec: UnitRecord, task_id: str, failure: Failure, now: float) -> tuple[list[str], list[str]]:
    """The withdraw script's keys and arguments (no I/O: the sync and the async client both run it)."""
    kind = "turn" if rec.kind == "turn" else "run"
    ids = {"turn_id": rec.unit_id} if kind == "turn" else {}
    data = {**ids, "class": failure.failure_class, "retryable": failure.retryable, "message": failure.message}
    events = [
        encode_event(f"{kind}.failed", rec.owner_id, {**data, "resumable_round": stored}, at=now)
        for stored in (False, True)
    ]
    queue = keys.queue(rec.owner_id) if kind == "turn" else keys.record(rec.owner_id, rec.unit_id) + ":none"
    script_keys = [
        keys.record(rec.owner_id, rec.unit_id),
        queue,
        keys.events(rec.owner_id),
        keys.round_slot(rec.owner_id),
        keys.settled(rec.owner_id),
    ]
    args = [
        json.dumps(task_id),
        failure.model_dump_json(by_alias=True),
        rec.unit_id,
        json.dumps(now),
        str(EVENTS_MAXLEN),
        *events,
        str(settled.MAXLEN),
    ]
    return script_keys, args


def withdraw(client: redis.Redis, rec: UnitRecord, task_id: str, failure: Failure) -> bool:
    """Fail `rec` if it is still queued under `task_id`; True when it was."""
    script_keys, args = withdraw_call(rec, task_id, failure, time.time())
    return bool(client.eval(WITHDRAW, len(script_keys), *script_keys, *args))
