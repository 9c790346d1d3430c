"""The recovery sweep: requeue units whose executing worker vanished without draining."""

from __future__ import annotations

import time

import redis
from celery import Celery

from agent.events import encode_event
from agent.messages import DEPLOY_NOTICE, dump_message, notice
from agent.policy import after_interruption
from config.settings import Settings
from tasks import keys
from tasks.records import Failure
from tasks.store import chat_head, load_record


def sweep_once(client: redis.Redis, app: Celery, settings: Settings, *, now: float | None = None) -> list[str]:
    """Requeue every stale, lease-less, still-running unit once; returns the owners requeued."""
    now = time.time() if now is None else now
    stale = client.zrangebyscore(keys.ACTIVE, "-inf", now - settings.lease_ttl)
    recovered: list[str] = []
    for raw in stale:
        owner_id = raw.decode()
        if client.exists(keys.lease(owner_id)):
            continue  # alive (its heartbeat will refresh the score) or just taken over
        if not client.set(keys.recover(owner_id), "1", nx=True, px=int(settings.lease_ttl * 1000)):
            continue  # another worker's sweeper has it
        kind, _, ident = owner_id.partition(":")
        unit_id = chat_head(client, owner_id) if kind == "chat" else ident
        rec = load_record(client, owner_id, unit_id) if unit_id else None
        if rec is None or rec.status != "running":
            client.zrem(keys.ACTIVE, owner_id)
            continue
        if _requeue(client, app, settings, rec):
            recovered.append(owner_id)
        client.zrem(keys.ACTIVE, owner_id)
    return recovered


def _requeue(client: redis.Redis, app: Celery, settings: Settings, rec) -> bool:  # noqa: ANN001
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
        pipe.execute()
        return False
    text = DEPLOY_NOTICE.format(attempt=verdict.attempt, max_attempts=verdict.max_attempts)
    pipe.hset(record_key, mapping={"status": '"waiting"', "waiting_reason": '"platform_interrupt"'})
    pipe.rpush(keys.transcript(rec.owner_id), dump_message(notice("interrupted", text, rec.unit_id)))
    kind = "run.interrupted" if rec.kind == "run" else "turn.retry"
    data = {"cause": "worker_lost", "attempt": verdict.attempt, "max_attempts": verdict.max_attempts, "message": text}
    if rec.kind == "turn":
        data.update({"message_id": f"{rec.unit_id}:lost", "discarded": True, "reason": "platform interrupt"})
    pipe.xadd(keys.events(rec.owner_id), {"e": encode_event(kind, rec.owner_id, {**ids, **data})})
    pipe.execute()
    name, args = (
        ("baton.chat_turn", [rec.owner_id.partition(":")[2], rec.unit_id])
        if rec.kind == "turn"
        else ("baton.coding_run", [rec.unit_id])
    )
    app.send_task(name, args=args, task_id=rec.task_id or None, queue=settings.queue)
    return True
