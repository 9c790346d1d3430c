"""Declares the broker's dead-letter exchange and queues each time the worker's consumer connects (RabbitMQ only).

A work queue names `baton.deadletter` as its dead-letter exchange; RabbitMQ silently drops a dead letter
whose exchange does not exist, or that no queue is bound for, so the consumer declares it, and a queue behind
it for every work queue it consumes (its own `BATON_QUEUE`, or what `-Q` names: an agent's queue), before it
consumes: on its first connection and after every reconnect (a node rebuilt without its definitions gets them
back). It is done on the consumer's own connection, after Celery's connect, which retries an unreachable broker
and says so each time; a declaration at `worker_init` instead waited there silently, before any log existed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from config.topology import dead_letter_queue

log = logging.getLogger("baton.topology")
_declared: list[bool] = []


def declare_dead_letters(conn: Any, queues: Iterable[str]) -> None:
    """Declare the dead-letter exchange, and the dead-letter queue of each of `queues`, on a connected broker
    connection."""
    level = logging.DEBUG if _declared else logging.INFO
    with conn.channel() as channel:
        for name in queues:
            queue = dead_letter_queue(name)
            queue(channel).declare()
            log.log(level, "dead letters of %s go to the queue %s", name, queue.name)
    _declared.append(True)
