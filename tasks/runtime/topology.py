"""Declares the broker's dead-letter exchange and queue each time the worker's consumer connects (RabbitMQ only).

The work queue names `baton.deadletter` as its dead-letter exchange; RabbitMQ silently drops a dead letter
whose exchange does not exist, so the consumer declares it, and the queue behind it, before it consumes: on
its first connection and after every reconnect (a node rebuilt without its definitions gets them back). It
is done on the consumer's own connection, after Celery's connect, which retries an unreachable broker and
says so each time; a declaration at `worker_init` instead waited there silently, before any log existed.
"""

from __future__ import annotations

import logging
from typing import Any

from config.topology import dead_letter_queue
from tasks.app import settings

log = logging.getLogger("baton.topology")
_declared: list[bool] = []


def declare_dead_letters(conn: Any) -> None:
    """Declare the dead-letter exchange and queue on a connected broker connection."""
    queue = dead_letter_queue(settings.queue)
    with conn.channel() as channel:
        queue(channel).declare()
    level = logging.DEBUG if _declared else logging.INFO
    log.log(level, "dead letters of %s go to the queue %s", settings.queue, queue.name)
    _declared.append(True)
