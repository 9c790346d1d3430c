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

# How long before a message whose hand-off the broker refused comes back to make it again. Without a wait, a broker
# that keeps refusing (a work queue over a length limit) gets the message back at once and refuses it again: a loop
# at the speed of a round trip. The wait doubles with each refusal in a row, up to a cap. The message is sent again
# as a new one with that countdown (the count in `REFUSALS_HEADER`), so its pool slot is free meanwhile and the
# returns never count against a quorum queue's delivery limit (RabbitMQ 4.0's default of 20 dead-lettered the
# message that carries the hand-off after about three minutes of refusals). Only where that send fails too (the
# broker down, its own queue refusing) does the message go back the old way: rejected with requeue after the wait,
# spent in its slot, its count the queue's `x-delivery-count`.
REFUSED_HAND_OFF_PAUSE = 1.0
REFUSED_HAND_OFF_MAX_PAUSE = 10.0
DELIVERY_COUNT_HEADER = "x-delivery-count"
REFUSALS_HEADER = "baton_hand_off_refusals"
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
        send_again(task, outcome.countdown)
        raise Ignore()
    exc = PlatformInterrupt(outcome.reason) if outcome.action == "requeue" else AutoResume(outcome.reason)
    raise task.retry(countdown=broker_countdown(settings.broker, outcome.countdown), exc=exc, max_retries=None)


def send_again(task: Task, countdown: float, headers: dict[str, Any] | None = None) -> None:
    """Publish the task's message again after `countdown` seconds, back to the queue it came from, with `headers`
    beside whose unit it is. Same task id, so clients and Flower keep one identity; the caller then raises `Ignore`,
    and the message delivered now is acknowledged."""
    user = message_user(task)
    task.apply_async(
        args=task.request.args,
        kwargs=task.request.kwargs,
        task_id=task.request.id,
        countdown=broker_countdown(settings.broker, countdown),
        queue=delivered_queue(task),  # back where it came from: its agent's queue, not this worker's default
        headers={**({USER_HEADER: user} if user is not None else {}), **(headers or {})} or None,
    )


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
    message comes back later (`REFUSED_HAND_OFF_PAUSE` above) and finds the turn finished and makes the hand-off
    again (flow's `already finished`).

    Acknowledged with nothing sent back, the message would leave the next turn waiting for good on RabbitMQ, whose
    queues the lost-message sweep cannot see. A publish that keeps failing brings the message back once per failed
    attempt, each after kombu's publish retries and `refused_hand_off_pause`: a slow loop, that ends when the broker
    takes the publish."""
    try:
        task.apply_async(args=list(nxt.args), task_id=nxt.task_id, queue=nxt.queue or settings.queue,
                         headers={USER_HEADER: nxt.user or ""})
    except Exception as err:
        refused = refusals_before(task)
        pause = refused_hand_off_pause(refused)
        log.warning("could not start the next turn %s (%s: %s); this turn's message goes back to its queue to make "
                    "the hand-off again in %.0f s", nxt.args, type(err).__name__, err, pause)
        try:
            send_again(task, pause, {REFUSALS_HEADER: refused + 1})
        except Exception as again:
            log.warning("could not send it back for later either (%s: %s): it is returned as it is after the wait",
                        type(again).__name__, again)
            _pause(pause)
            raise Reject(f"the hand-off to {nxt.task_id} was not published", requeue=True) from err
        raise Ignore() from err


def refusals_before(task: Task) -> int:
    """How many times in a row the hand-off this message carries was refused before: what it was sent back with
    (`REFUSALS_HEADER`), or, returned as it was, how often its queue counted it returned (`x-delivery-count`)."""
    return max(_count(task.request.get(REFUSALS_HEADER)), _count(task.request.get(DELIVERY_COUNT_HEADER)))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def refused_hand_off_pause(returned: object) -> float:
    """The wait before a refused hand-off's message comes back, the hand-off having been refused `returned` times in
    a row before (anything but a positive count: the first time)."""
    return min(REFUSED_HAND_OFF_PAUSE * float(2 ** min(_count(returned), 16)), REFUSED_HAND_OFF_MAX_PAUSE)


def reject_invalid(task: Task, problem: str) -> None:
    """A message whose arguments fail validation is rejected (dead-lettered by the broker), never retried."""
    from tasks.runtime.deadletter import record

    record(f"arguments failed validation: {problem}", headers={"task": task.name, "id": task.request.id},
           content_type="application/json", body={"args": task.request.args, "kwargs": task.request.kwargs})
    raise Reject(problem, requeue=False)
