"""The broker topology: which broker a URL names, and on RabbitMQ the work queue and its dead-letter queue.

On RabbitMQ the work queue is a quorum queue (replicated, and its consumers get per-consumer prefetch),
bound to a topic exchange of the same name so Celery's native delayed delivery (countdowns through the
`celery_delayed_*` queues) can reach it. A message the worker refuses, or one the broker gives up on (past a
delivery limit), is dead-lettered into `<queue>.deadletter` through the `baton.deadletter` exchange: it stays
on the broker for an operator to read, never dropped.

Every queue a Baton app publishes to is declared that way, not only its own (`BATON_QUEUE`): an agent's queue
(`Agent(queue=...)`) is named only as a send goes, and Celery declares a queue it was not configured with as a
classic-style one on a direct exchange, which RabbitMQ refuses once the agent's workers declared theirs
(PRECONDITION_FAILED, inequivalent exchange type), and which, declared first, kept those workers from starting.
"""

from __future__ import annotations

from typing import Any, Literal

from celery.app.amqp import AMQP, Queues
from kombu import Exchange, Queue

BrokerKind = Literal["redis", "amqp"]

DEAD_LETTER_EXCHANGE = "baton.deadletter"


def broker_kind(url: str) -> BrokerKind:
    """`amqp` for RabbitMQ URLs, `redis` for Redis ones (plain, TLS, unix socket or Sentinel)."""
    return "amqp" if url.startswith(("amqp://", "amqps://", "pyamqp://")) else "redis"


def broker_countdown(url: str, seconds: float) -> float:
    """The countdown to publish with: RabbitMQ's native delayed delivery counts whole seconds and refuses a
    positive countdown below one (kombu: "countdown must be a positive number"), so those wait one second."""
    if broker_kind(url) == "amqp" and 0 < seconds < 1:
        return 1.0
    return seconds


def dead_letter_queue_name(queue: str) -> str:
    """Where the broker puts the work queue's refused messages."""
    return f"{queue}.deadletter"


def work_queue_arguments(queue: str) -> dict[str, Any]:
    """The work queue's declaration arguments; every declarer (worker, client, sweeper) uses these exactly,
    since RabbitMQ refuses a re-declaration with different ones (406 PRECONDITION_FAILED)."""
    return {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
        "x-dead-letter-routing-key": queue,
        # Dead-lettering that cannot lose the message (3.10+); it needs reject-publish overflow.
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }


def work_queue(queue: str) -> Queue:
    """The quorum work queue on its topic exchange (a direct exchange cannot take delayed deliveries)."""
    return Queue(
        queue,
        Exchange(queue, type="topic", durable=True),
        routing_key=queue,
        durable=True,
        queue_arguments=work_queue_arguments(queue),
    )


class WorkQueues(Queues):
    """Celery's queues, where one a send names and this app was not configured with (an agent's queue) is a work
    queue as its workers declare it."""

    def new_missing(self, name: str) -> Queue:
        return work_queue(name)


class WorkQueuesAMQP(AMQP):
    """Celery's AMQP side with `WorkQueues`."""

    queues_cls = WorkQueues


def celery_amqp(broker: str) -> str | None:
    """The AMQP class a Baton Celery app is made with (`Celery(amqp=...)`; None: Celery's own, on a Redis broker,
    whose queues have no arguments or exchange types to disagree on)."""
    return "config.topology:WorkQueuesAMQP" if broker_kind(broker) == "amqp" else None


def dead_letter_queue(queue: str) -> Queue:
    """The durable queue holding the work queue's dead letters (a quorum queue too: it must not lose them)."""
    return Queue(
        dead_letter_queue_name(queue),
        Exchange(DEAD_LETTER_EXCHANGE, type="direct", durable=True),
        routing_key=queue,
        durable=True,
        queue_arguments={"x-queue-type": "quorum"},
    )
