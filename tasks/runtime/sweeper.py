"""The recovery sweep: requeue units whose executing worker vanished without draining."""

from __future__ import annotations

import time

import redis
from celery import Celery

from agent.events import encode_event
from agent.loop.policy import after_interruption
from agent.messages import DEPLOY_NOTICE, dump_message, notice
from config.settings import Settings
from tasks.store import budgets, indexes, keys, settled
from tasks.store.ahead import USER_HEADER
from tasks.store.reads import chat_head, chat_head_record, load_record
from tasks.store.records import Failure, UnitRecord
from tasks.store.replies import blobs


def sweep_once(client: redis.Redis, app: Celery, settings: Settings, *, now: float | None = None) -> list[str]:
    """Requeue every stale, lease-less, still-running unit once; returns the owners requeued."""
    now = time.time() if now is None else now
    recovered: list[str] = []
    for shard, owner_id, _ in indexes.due(client, keys.ACTIVE, now - settings.lease_ttl):
        if client.exists(keys.lease(owner_id)):
            continue  # alive (its heartbeat will refresh the score) or just taken over
        if not client.set(keys.recover(owner_id), "1", nx=True, px=int(settings.lease_ttl * 1000)):
            continue  # another worker's sweeper has it
        kind, _, ident = owner_id.partition(":")
        unit_id = chat_head(client, owner_id) if kind == "chat" else ident
        rec = load_record(client, owner_id, unit_id) if unit_id else None
        if rec is None or rec.status != "running":
            client.zrem(shard, owner_id)
            continue
        # The lost worker's attempt in flight may have been billed: its reservation is settled at the worst case.
        budgets.release_lost(client, owner_id)
        if _requeue(client, app, settings, rec):
            recovered.append(owner_id)
        client.zrem(shard, owner_id)
    return recovered


def _requeue(client: redis.Redis, app: Celery, settings: Settings, rec: UnitRecord) -> bool:
    count = int(client.hincrby(keys.record(rec.owner_id, rec.unit_id), "interruptions", 1))
    verdict = after_interruption(count, settings.max_interruptions, has_record=True)
    prefix = "turn" if rec.kind == "turn" else "run"
    pipe = client.pipeline(transaction=True)
    record_key = keys.record(rec.owner_id, rec.unit_id)
    ids = {"turn_id": rec.unit_id} if rec.kind == "turn" else {}
    if not verdict.resume:
        failure = Failure.model_validate(
            {
                "class": "infra_transient",
                "retryable": True,
                "message": f"its worker was lost {count} times; the limit is {settings.max_interruptions}",
            }
        )
        pipe.hset(
            record_key,
            mapping={"status": '"failed"', "failure": failure.model_dump_json(by_alias=True), "waiting_reason": "null"},
        )
        pipe.rpush(keys.transcript(rec.owner_id), dump_message(notice("error", f"Failed: {failure.message}")))
        pipe.xadd(
            keys.events(rec.owner_id),
            {
                "e": encode_event(
                    f"{prefix}.failed",
                    rec.owner_id,
                    {
                        **ids,
                        "class": "infra_transient",
                        "retryable": True,
                        "message": failure.message,
                        "resumable_round": False,
                    },
                )
            },
        )
        if rec.kind == "turn":
            pipe.lrem(keys.queue(rec.owner_id), 1, rec.unit_id)
        pipe.xadd(keys.settled(rec.owner_id), {settled.FIELD: rec.unit_id}, maxlen=settled.MAXLEN, approximate=True)
        pipe.execute()
        if rec.kind == "turn":
            _hand_off(client, app, settings, rec.owner_id)
        return False
    text = DEPLOY_NOTICE.format(attempt=verdict.attempt, max_attempts=verdict.max_attempts)
    pipe.hset(record_key, mapping={"status": '"waiting"', "waiting_reason": '"platform_interrupt"'})
    pipe.rpush(keys.transcript(rec.owner_id), dump_message(notice("interrupted", text, rec.unit_id)))
    kind = "run.interrupted" if rec.kind == "run" else "turn.retry"
    data: dict[str, object] = {"cause": "worker_lost", "message": text}
    if rec.kind == "turn":
        # A turn.retry's `attempt` is the provider attempt it discards; which one (if any) streamed text is
        # known to the execution that replays the step, which voids it before its own text.
        data.update({"interruption": verdict.attempt, "max_interruptions": verdict.max_attempts})
        data.update({"message_id": f"{rec.unit_id}:lost", "discarded": True, "reason": "platform interrupt"})
    else:
        data.update({"attempt": verdict.attempt, "max_attempts": verdict.max_attempts})
    pipe.xadd(keys.events(rec.owner_id), {"e": encode_event(kind, rec.owner_id, {**ids, **data})})
    pipe.execute()
    publish(app, settings, rec)
    return True


def _hand_off(client: redis.Redis, app: Celery, settings: Settings, owner_id: str) -> None:
    """A turn the sweep gave up on left its chat's queue: start the next turn, as a settle would."""
    nxt = chat_head_record(client, owner_id)
    if nxt is not None and nxt.awaits_hand_off:
        publish(app, settings, nxt)


def publish(app: Celery, settings: Settings, rec: UnitRecord) -> None:
    """Send the unit's task again, under its current task id (so a duplicate copy is recognisably the same)."""
    name, args = (
        ("baton.chat_turn", [rec.owner_id.partition(":")[2], rec.unit_id])
        if rec.kind == "turn"
        else ("baton.coding_run", [rec.unit_id])
    )
    app.send_task(name, args=args, task_id=rec.task_id or None, queue=rec.queue or settings.queue,
                  headers={USER_HEADER: rec.user or ""})


KOMBU_UNACKED = "unacked"  # the hash where kombu's Redis transport keeps delivered, unacknowledged messages

# Forget an owner only if nobody re-enqueued it since we read its score. Compared as numbers: both texts are
# one double's round-trip digits, but not always the same digits (redis-py 8.2 may print a score itself, %.17g).
_FORGET = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


def pending_check_seconds(settings: Settings) -> float:
    """How long a unit may stay enqueued and unstarted before its broker message is looked for."""
    return max(10.0, 2 * settings.lease_ttl)


def sweep_lost_messages(
    client: redis.Redis, broker: redis.Redis | None, app: Celery, settings: Settings, *, now: float | None = None
) -> list[str]:
    """Republish units whose broker message vanished before they started; returns the owners republished.

    kombu's Redis transport pops a message (BRPOP) and only then records it as unacked: a worker SIGKILLed, or a
    Redis crash, in between loses the message, and no visibility timeout brings it back (the chaos bench found
    both). Every owner with unfinished work is in `keys.PENDING` from its enqueue until it has nothing left to
    start; an unstarted unit due for a check has its message looked for in its queue (its agent's, or the
    worker's) and the unacked hash, and is republished under the same task id when it is in neither. A needless
    copy (one caught in flight) is harmless: the lease, or the finished record, turns the second copy away. With no
    Redis broker to look in (`broker` None: RabbitMQ, which does not lose a delivered message this way) it only
    forgets owners with nothing left.
    """
    now = time.time() if now is None else now
    queued: dict[str, bytes] = {}  # each queue's messages, read once a pass
    unacked: bytes | None = None
    republished: list[str] = []
    for shard, owner_id, score in indexes.due(client, keys.PENDING, now - pending_check_seconds(settings)):
        kind, _, ident = owner_id.partition(":")
        unit_id = chat_head(client, owner_id) if kind == "chat" else ident
        rec = load_record(client, owner_id, unit_id) if unit_id else None
        if rec is None or rec.terminal or (rec.status == "waiting" and rec.waiting_reason == "approval"):
            # Nothing left to start (parked for approval: the decision that settles it enqueues it again).
            client.eval(_FORGET, 1, shard, owner_id, score)
            continue
        client.zadd(shard, {owner_id: now}, xx=True)  # checked: next look one period from now
        if broker is None or rec.status == "running" or client.exists(keys.lease(owner_id)):
            continue  # started: the lease and the recovery sweep look after it
        queue = rec.queue or settings.queue
        if queue not in queued:
            queued[queue] = b"\n".join(blobs(broker.lrange(queue, 0, -1)))
        if unacked is None:
            unacked = b"\n".join(blobs(broker.hvals(KOMBU_UNACKED)))
        if rec.task_id.encode() in queued[queue] or rec.task_id.encode() in unacked:
            continue  # queued, or held by a worker (a dead one's comes back after the visibility timeout)
        if not client.set(keys.recover(owner_id), "1", nx=True, px=int(settings.lease_ttl * 1000)):
            continue  # another worker's sweeper has it
        publish(app, settings, rec)
        republished.append(owner_id)
    return republished
