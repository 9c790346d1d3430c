"""Declares the broker's dead-letter exchange and queue when a worker starts (RabbitMQ only).

The work queue names `baton.deadletter` as its dead-letter exchange; RabbitMQ silently drops a dead letter
whose exchange does not exist, so the worker declares it, and the queue behind it, before it consumes.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from config.topology import broker_kind, dead_letter_queue
from tasks.app import app, settings

log = logging.getLogger("baton.topology")


@signals.worker_init.connect
def _declare_dead_letters(**_: Any) -> None:
    if broker_kind(settings.broker) != "amqp":
        return  # the Redis transport has no dead-lettering: refused messages are recorded in Redis only
    queue = dead_letter_queue(settings.queue)
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=10)
        queue(conn.default_channel).declare()
    log.info("dead letters of %s go to the queue %s", settings.queue, queue.name)
