"""Declares the worker's queues and the broker's dead-letter exchange and queues each time the worker's consumer
connects (RabbitMQ only).

Each queue the worker consumes is declared first as the work queue it is (config/topology.py), so that one RabbitMQ
holds declared another way (an agent's queue declared by an earlier Baton on a direct exchange, or by another app)
stops the worker with what to do, exit code 1. Left to Celery, the same refusal (406 PRECONDITION_FAILED) read
"Connection to broker lost", and the consumer reconnected and was refused again a hundred times a second, for ever,
without consuming.

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

from amqp.exceptions import PreconditionFailed
from celery.exceptions import WorkerShutdown
from kombu import Queue

from config.topology import dead_letter_queue

log = logging.getLogger("baton.topology")
_declared: list[bool] = []


def declared_otherwise(queue: str, refusal: str) -> str:
    """What a worker says when RabbitMQ holds `queue` declared another way (`refusal`: the broker's words)."""
    return (
        f"the queue {queue} is declared on the broker another way ({refusal}): an earlier Baton or another app "
        f"declared it, and RabbitMQ will not declare it again as a work queue (quorum, dead-lettering, on a topic "
        f"exchange). Once it is drained, delete it and its exchange (rabbitmqctl delete_queue {queue}; rabbitmqadmin "
        f"delete exchange name={queue}), then start the worker again. Stopping."
    )


def declare_work_queues(conn: Any, queues: Iterable[Queue]) -> None:
    """Declare each of `queues` (what the worker consumes) as Celery is about to; one the broker holds declared
    another way stops the worker (`WorkerShutdown(1)`) with `declared_otherwise`."""
    with conn.channel() as channel:
        for queue in queues:
            try:
                queue(channel).declare()
            except PreconditionFailed as refused:
                log.critical(declared_otherwise(queue.name, refused.reply_text))
                raise WorkerShutdown(1) from refused


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
