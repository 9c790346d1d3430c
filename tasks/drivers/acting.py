"""Turning an execution's `Outcome` into what Celery does with the message."""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore, Reject

from agent.errors import BatonError
from config.topology import broker_countdown
from tasks.app import settings
from tasks.execution.flow import Execution
from tasks.execution.settling import HandOff, Outcome
from tasks.store.ahead import USER_HEADER

log = logging.getLogger("baton.tasks")

# How long a worker waits before it sends back a message whose hand-off the broker refused. Without it, a broker
# that keeps refusing (a work queue over a length limit) gets the message back at once and refuses it again: a loop
# at the speed of a round trip, and on RabbitMQ 4.0 twenty redeliveries (its default delivery limit) within the
# same second, which dead-letters the message that carries the hand-off. The wait doubles with each time the
# broker says the message came back before (a quorum queue's `x-delivery-count`), up to a cap, so those twenty
# returns span about three minutes of refusals rather than twenty seconds; the cap bounds how long the pause holds
# one pool slot, which a worker draining an over-full queue needs back.
REFUSED_HAND_OFF_PAUSE = 1.0
REFUSED_HAND_OFF_MAX_PAUSE = 10.0
DELIVERY_COUNT_HEADER = "x-delivery-count"
_pause = time.sleep


class PlatformInterrupt(BatonError):
    """The worker is draining (a deploy); the unit was checkpointed and requeued at no cost to the owner."""

    failure_class = "infra_transient"


class AutoResume(BatonError):
    """A unit retried by itself: a retryable provider failure after a tool round (resuming from the stored round),
    or a write tool waiting for the store's replica to confirm its write-ahead entry (resuming its journal)."""

    failure_class = "infra_transient"


class StoreUnavailable(BatonError):
    """The store could not be reached; the message is published again to try later."""

    failure_class = "infra_transient"


STORE_RETRY_SECONDS = 1.0


def execute(task: Task, execution: Execution) -> dict[str, Any]:
    """Run the execution and act on its outcome; a store outage requeues the message instead of losing it.

    With RabbitMQ as the broker, workers keep receiving messages while Redis is down; a task that failed on
    the store would be acknowledged and its unit never started (nothing else republishes it there). A copy
    published for later is harmless if the unit had started: the lease or its finished record turns it away.
    """
    try:
        outcome = execution.run()
    except redis.RedisError as err:
        log.warning("the store is unreachable (%s); message %s published again in %gs", err, task.request.id,
                    STORE_RETRY_SECONDS)
        raise task.retry(countdown=STORE_RETRY_SECONDS, exc=StoreUnavailable(str(err)), max_retries=None) from err
    return act(task, outcome)


def act(task: Task, outcome: Outcome) -> dict[str, Any]:
    """Return the result, or requeue, defer or drop the message as the outcome says."""
    if outcome.action == "done":
        if outcome.hand_off is not None:
            hand_off(task, outcome.hand_off)
        return {"status": outcome.reason}
    if outcome.action == "drop":
        log.info("dropping message %s: %s", task.request.id, outcome.reason)
        raise Ignore()
    if outcome.action == "defer":
        # Same task id, so clients and Flower keep one identity; the original message is acked.
        user = message_user(task)
        task.apply_async(
            args=task.request.args,
            kwargs=task.request.kwargs,
            task_id=task.request.id,
            countdown=broker_countdown(settings.broker, outcome.countdown),
            queue=delivered_queue(task),  # back where it came from: its agent's queue, not this worker's default
            headers={USER_HEADER: user} if user is not None else None,
        )
        raise Ignore()
    exc = PlatformInterrupt(outcome.reason) if outcome.action == "requeue" else AutoResume(outcome.reason)
    raise task.retry(countdown=broker_countdown(settings.broker, outcome.countdown), exc=exc, max_retries=None)


def delivered_queue(task: Task) -> str:
    """The queue the task's message came from (a unit's agent may have its own), else the worker's default."""
    info = task.request.delivery_info or {}
    queue = info.get("routing_key")
    return queue if isinstance(queue, str) and queue else settings.queue


def message_user(task: Task) -> str | None:
    """Whose unit the message says it is (`USER_HEADER`: "" for nobody's), None when it does not say (an older
    publisher's message, or one published without its record at hand)."""
    user = task.request.get(USER_HEADER)
    return user if isinstance(user, str) else None


def hand_off(task: Task, nxt: HandOff) -> None:
    """Start the chat's next turn, right after this one's settle; when the broker refuses the publish, this turn's
    message goes back to its queue (acks are late: it is not acknowledged yet), and its next delivery finds the
    turn finished and makes the hand-off again (flow's `already finished`).

    Acknowledged instead, the message would leave the next turn waiting for good on RabbitMQ, whose queues the
    lost-message sweep cannot see. A publish that keeps failing brings the message back once per failed attempt,
    each after kombu's publish retries and `refused_hand_off_pause`: a slow loop, that ends when the broker takes the
    publish."""
    try:
        task.apply_async(args=list(nxt.args), task_id=nxt.task_id, queue=nxt.queue or settings.queue,
                         headers={USER_HEADER: nxt.user or ""})
    except Exception as err:
        pause = refused_hand_off_pause(task.request.get(DELIVERY_COUNT_HEADER))
        log.warning("could not start the next turn %s (%s: %s); this turn's message goes back to its queue to make "
                    "the hand-off again in %.0f s", nxt.args, type(err).__name__, err, pause)
        _pause(pause)
        raise Reject(f"the hand-off to {nxt.task_id} was not published", requeue=True) from err


def refused_hand_off_pause(returned: object) -> float:
    """The wait before a refused hand-off's message goes back, the broker having returned it `returned` times before
    (its delivery count; anything but a positive count, as a Redis broker's message has none: the first time)."""
    times = returned if isinstance(returned, int) and not isinstance(returned, bool) and returned > 0 else 0
    return min(REFUSED_HAND_OFF_PAUSE * float(2 ** min(times, 16)), REFUSED_HAND_OFF_MAX_PAUSE)


def reject_invalid(task: Task, problem: str) -> None:
    """A message whose arguments fail validation is rejected (dead-lettered by the broker), never retried."""
    from tasks.runtime.deadletter import record

    record(f"arguments failed validation: {problem}", headers={"task": task.name, "id": task.request.id},
           content_type="application/json", body={"args": task.request.args, "kwargs": task.request.kwargs})
    raise Reject(problem, requeue=False)
