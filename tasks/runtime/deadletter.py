"""Poison messages go where an operator can see them: the `baton:deadletter` list in Redis.

A pickle (refused by `accept_content`), a body that is not JSON, an unknown task name, or
arguments that fail validation are logged with the problem, recorded here, and acknowledged or
rejected without requeue, so they are never redelivered forever and the worker stays healthy.
On RabbitMQ every one of them is rejected (never acknowledged), so the broker also dead-letters the
message itself, whole, into the work queue's dead-letter queue (config/topology.py).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from celery.worker.consumer import Consumer

from config.topology import broker_kind
from tasks.app import settings
from tasks.execution import wiring
from tasks.runtime.topology import declare_dead_letters, declare_work_queues

DEADLETTER = "baton:deadletter"
DEADLETTER_MAX = 10_000
log = logging.getLogger("baton.deadletter")


def record(reason: str, *, headers: dict[str, Any] | None = None, content_type: str | None = None,
           body: Any = None) -> None:
    """Append one poison message's description (never raises: the consumer must keep going)."""
    headers = headers or {}
    raw = body if isinstance(body, bytes | str) else json.dumps(body, default=str)
    preview = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    entry = {"at": time.time(), "reason": reason, "task": headers.get("task"), "id": headers.get("id"),
             "content_type": content_type, "body": preview[:2000]}
    log.error("dead-lettered message %s (%s): %s", entry["id"], entry["task"], reason)
    try:
        client = wiring.store(settings)
        pipe = client.pipeline()
        pipe.lpush(DEADLETTER, json.dumps(entry))
        pipe.ltrim(DEADLETTER, 0, DEADLETTER_MAX - 1)
        pipe.execute()
    except Exception:
        log.exception("could not record a dead letter")


def _describe(message: Any) -> dict[str, Any]:
    return {"headers": dict(getattr(message, "headers", None) or {}),
            "content_type": getattr(message, "content_type", None),
            "body": getattr(message, "body", None)}


class DeadLetterConsumer(Consumer):
    """Celery's consumer, recording every message it refuses before refusing it as usual; on RabbitMQ it
    declares its queues and where the broker's dead letters go each time it connects."""

    def connect(self) -> Any:
        conn = super().connect()
        if broker_kind(settings.broker) == "amqp":
            consumed = self.app.amqp.queues.consume_from  # what -Q selected
            declare_work_queues(conn, consumed.values())
            declare_dead_letters(conn, consumed.keys())
        return conn

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        record(f"undecodable or refused content: {exc}", **_describe(message))
        if broker_kind(settings.broker) == "amqp":
            # Celery acknowledges such a message (gone for good); a reject lets RabbitMQ dead-letter it.
            log.critical("refused a message it cannot decode (%s); rejected to the dead-letter queue", exc)
            message.reject_log_error(log, self.connection_errors)
            return
        super().on_decode_error(message, exc)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        record("not a task message", **_describe(message))
        super().on_unknown_message(body, message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        record(f"unknown task: {exc}", **_describe(message))
        super().on_unknown_task(body, message, exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        record(f"invalid task message: {exc}", **_describe(message))
        super().on_invalid_task(body, message, exc)
