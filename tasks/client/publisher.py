"""Handing a unit's task to the broker, and withdrawing the unit when the broker cannot take it.

A unit that was queued in Redis but whose message no broker holds would wait for nobody (on RabbitMQ nothing
publishes it again, and a chat's later turns queue behind it), so a publish that fails fails the unit as
retryable, and `Unavailable` says what became of it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from celery import Celery
from kombu.common import maybe_declare
from kombu.exceptions import BatchPublishError
from kombu.transport.redis import PublishBatch

from config.celeryconfig import celery_config
from config.settings import Settings
from config.topology import celery_amqp
from tasks.client.sent_events import SentEvents
from tasks.reach import BROKER_ERRORS, BROKER_REFUSALS, Unavailable
from tasks.runtime.kombu_fixes import install as install_kombu_fixes
from tasks.store.ahead import USER_HEADER
from tasks.store.fenced import Batch
from tasks.store.reads import chat_head_record
from tasks.store.records import Failure, UnitRecord
from tasks.store.withdrawal import withdraw
from tasks.telemetry.propagation import headers as trace_headers

log = logging.getLogger("baton.client")

BROKER_DOWN = Failure.model_validate(
    {
        "class": "infra_transient",
        "retryable": True,
        "message": "Baton could not reach the broker to start it; nothing ran. Retry when it is back.",
    }
)
BROKER_REFUSED = Failure.model_validate(
    {
        "class": "infra_transient",
        "retryable": True,
        "message": "The broker refused to take it (its queue declared another way, as by an earlier Baton: see the "
                   "README's RabbitMQ upgrade; or not allowed to this user); nothing ran. Retry once the broker "
                   "takes it.",
    }
)
# What a failed publish raises, where the unit's message may not exist: the unit is withdrawn (`failure_of`).
PUBLISH_ERRORS = BROKER_ERRORS + BROKER_REFUSALS


def failure_of(err: BaseException) -> Failure:
    """The failure a unit is withdrawn with when its publish raised `err` (one of `PUBLISH_ERRORS`)."""
    return BROKER_REFUSED if isinstance(err, BROKER_REFUSALS) else BROKER_DOWN


class _Celery(Celery):
    """The client's Celery app: it publishes tasks without subscribing to their results as it sends them.

    Celery's Redis result backend subscribes to a task's result channel in `send_task` (and unsubscribes when
    the `AsyncResult` is dropped): two round trips per turn for a result this client never reads, since it
    awaits the unit's own events. `AsyncResult.get()` still works: it subscribes, then reads the stored
    result, when it is called.
    """

    def _get_backend(self) -> Any:
        backend = super()._get_backend()
        backend.on_task_call = _no_subscription
        return backend


def _no_subscription(producer: object, task_id: str) -> None:
    return None


class _Kept(PublishBatch):
    """kombu's batch of a Redis channel's publish commands, kept in `into` instead of sent: `Publisher.prepared`'s.
    A PUBLISH (the task-sent event) is kept as a read: its reply, how many heard it, comes back with the enqueue's.
    (`_buffered` is kombu's count of what a flush sends: none is left to send.)"""

    def __init__(self, channel: Any, max_size: int, into: Batch) -> None:
        super().__init__(channel, max_size)
        self._into = into

    def flush(self) -> None:
        for args, _options in self.pipeline.command_stack:
            command, key, *rest = (str(part) for part in args)
            (self._into.read if command == "PUBLISH" else self._into.add)(command, key, *rest)
        self.pipeline.reset()
        self._buffered = 0


class _Heard(PublishBatch):
    """kombu's batch of a Redis channel's publish commands, sent as kombu sends it, passing the task-sent event's
    PUBLISH reply (how many heard it) to `heard`: `Publisher.publish`'s, to a Redis that is not the store."""

    def __init__(self, channel: Any, max_size: int, heard: Callable[[int], None]) -> None:
        super().__init__(channel, max_size)
        self._heard = heard

    def flush(self) -> None:
        published = [at for at, (args, _options) in enumerate(self.pipeline.command_stack) if args[0] == "PUBLISH"]
        replies: list[Any] = []
        execute = self.pipeline.execute

        def kept(*args: Any, **kwargs: Any) -> Any:
            replies.extend(execute(*args, **kwargs))
            return replies

        self.pipeline.execute = kept  # kombu's flush, its errors and resets as they are; only the replies kept
        try:
            super().flush()
        finally:
            del self.pipeline.execute
        if published and len(replies) > published[0] and isinstance(replies[published[0]], int):
            self._heard(replies[published[0]])


class Publisher:
    _now = staticmethod(time.monotonic)  # the sent events' clock

    def __init__(self, settings: Settings) -> None:
        install_kombu_fixes()  # one Redis client object per channel, not one per publish
        self.settings = settings
        self.celery = _Celery("baton-client", amqp=celery_amqp(settings.broker))
        self.celery.conf.update(celery_config(settings))
        # The same app without the task-sent event, for the sends `prepared` makes while no receiver hears it
        # (tasks/client/sent_events.py); it builds messages only, on `celery`'s producers.
        self.quiet = _Celery("baton-client", set_as_current=False, amqp=celery_amqp(settings.broker))
        self.quiet.conf.update(celery_config(settings), task_send_sent_event=False)
        self.sent_events = SentEvents()
        # The broker is the store's own Redis, by the same URL (not through Sentinels, not beside a cluster): a turn's
        # message may ride its enqueue (`prepared`).
        self.broker_is_store = (
            not settings.cluster and not settings.sentinels and settings.broker == settings.redis_url
            and settings.broker.startswith(("redis://", "rediss://", "unix://"))
        )

    def send(self, store: redis.Redis, rec: UnitRecord, task_id: str | None = None) -> None:
        """Publish the unit's task (under `task_id`, else its record's); if the broker cannot take it (down, or
        refusing it), the unit is failed as retryable rather than left queued for a message nobody holds, and
        `Unavailable` says so."""
        task_id = task_id or rec.task_id
        try:
            self.publish(rec, task_id)
        except PUBLISH_ERRORS as err:
            withdrawn = withdraw(store, rec, task_id, failure_of(err))
            if withdrawn and rec.kind == "turn":
                self._start_next(store, rec.owner_id)
            raise self.unavailable(rec, err, withdrawn=withdrawn) from err

    def unavailable(self, rec: UnitRecord, err: BaseException, *, withdrawn: bool) -> Unavailable:
        """What a failed publish raises: the broker named, and what became of the unit."""
        what, ident = (("turn", rec.owner_id.partition(":")[2]) if rec.kind == "turn" else ("run", rec.unit_id))
        consequence = (
            f"{what} {rec.unit_id} was not started; it is failed, retryable (baton retry {ident})"
            if withdrawn
            else f"{what} {rec.unit_id} may still start"
        )
        return Unavailable("broker", self.settings, err, consequence=consequence)

    def warm(self, connections: int) -> None:
        """Celery's lazy set-up, done now rather than by the first sends: the app's finalization, its message
        machinery and result backend, and `connections` broker connections with the queue declared on each.
        Measured: ~30 ms of CPU, most of it Python that holds the GIL; done by the first burst of sends on an
        asyncio client's publish threads, it held that client's event loop for 100 ms and more. Best effort: a
        broker that cannot be reached now is met (and reported) by the first send instead."""
        try:
            for app in (self.celery, self.quiet):
                app.finalize(auto=True)
                _ = (app.amqp.router, app.backend)
            queue = self.celery.amqp.queues[self.settings.queue]
            with contextlib.ExitStack() as held:
                for _n in range(connections):  # held together: the pool opens one connection for each
                    producer = held.enter_context(self.celery.producer_or_acquire())
                    producer.connection.ensure_connection(max_retries=1)
                    maybe_declare(queue, producer.channel)
        except Exception as err:  # a warm-up: the first send reports what is wrong
            log.debug("could not warm the broker connections up: %s", err)

    def prepared(self, rec: UnitRecord, task_id: str) -> Batch:
        """The Redis commands that would publish the unit's task (its LPUSH, and the task-sent event's PUBLISH), built
        by Celery and kombu as `publish` builds them and not sent: for the store's enqueue script to run, in the
        turn's own round trip (tasks/store/enqueue.py). Empty where the broker is not the store, or kombu would
        send them at once rather than batch them. The event only while a receiver hears it (`heard`)."""
        kept = Batch()
        if not self.broker_is_store:
            return kept
        with self.celery.producer_or_acquire() as producer:
            channel = producer.channel
            if not _batching(channel) or getattr(channel, "global_keyprefix", None):  # a prefix kombu adds as it sends
                return kept
            with _batches(channel, lambda max_size: _Kept(channel, max_size, kept)), producer.batch():
                self._send_task(rec, task_id, producer, self._app())
        return kept

    def heard(self, receivers: int | None) -> None:
        """How many received the task-sent event a send published (None: it published none): an enqueue's, of a
        message from `prepared`, or a Redis broker's, of one `publish` sent."""
        if receivers is not None:
            self.sent_events.heard(receivers, self._now())

    def publish(self, rec: UnitRecord, task_id: str) -> None:
        """The task message and its task-sent event (Flower's; on Redis, while a receiver hears it) in one batch:
        one round trip on Redis (on RabbitMQ they go one by one, as before). A batch that failed may or may not have
        been delivered, so it is published again the ordinary way, with Celery's retries: a second copy of a unit's
        message is harmless (the unit's record and lease turn it away), a lost one would not be."""
        try:
            with self.celery.producer_or_acquire() as producer:
                channel = producer.channel
                hearing: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
                if _batching(channel):  # one that does not (RabbitMQ's) tells nothing of who heard: it builds the event
                    hearing = _batches(channel, lambda max_size: _Heard(channel, max_size, self.heard))
                with hearing, producer.batch():
                    self._send_task(rec, task_id, producer, self._app())
        except BatchPublishError as err:
            log.info("publishing %s again after a batch that may not have been delivered: %s", rec.unit_id, err)
            self._send_task(rec, task_id, None)

    def _app(self) -> Celery:
        """The app a send builds its message with: with the task-sent event while a receiver may hear it."""
        return self.celery if self.sent_events.wanted(self._now()) else self.quiet

    def _send_task(self, rec: UnitRecord, task_id: str, producer: Any, app: Celery | None = None) -> None:
        if rec.kind == "run":
            name, args = "baton.coding_run", [rec.unit_id]
        else:
            name, args = "baton.chat_turn", [rec.owner_id.partition(":")[2], rec.unit_id]
        queue = rec.queue or self.settings.queue  # its agent's queue, when it has one
        # Whose unit it is, for the take to ask ahead what its first model call needs (tasks/store/ahead.py); and the
        # sender's `traceparent` when this process traces.
        headers = {USER_HEADER: rec.user or "", **trace_headers()}
        # The args' repr for Flower given, not left to Celery's `saferepr` (~25 µs a send, for two short ids).
        (app or self.celery).send_task(name, args=args, task_id=task_id, queue=queue, producer=producer,
                                       headers=headers, argsrepr=repr(args), kwargsrepr="{}")

    def _start_next(self, store: redis.Redis, owner_id: str) -> None:
        """A withdrawn turn left its chat's queue: the turn behind it (whose message was dropped because it was not
        at the head) is published, as a settle would. Best effort: the broker was just found unreachable."""
        nxt = chat_head_record(store, owner_id)
        if nxt is None or nxt.status != "queued":
            return
        try:
            self.publish(nxt, nxt.task_id)
        except PUBLISH_ERRORS as err:
            log.warning("could not publish %s after withdrawing the turn ahead of it: %s", nxt.unit_id, err)


def _batching(channel: Any) -> bool:
    """Whether kombu batches the channel's publishes (a Redis channel's: its commands in one pipeline)."""
    return bool(getattr(channel, "supports_batch_publish", False)) and hasattr(channel, "create_publish_batch")


@contextlib.contextmanager
def _batches(channel: Any, make: Callable[[int], PublishBatch]) -> Iterator[None]:
    """While open, the channel's publish batches are `make(max_size)`'s (`_Kept`, `_Heard`) instead of kombu's."""
    channel.create_publish_batch = make
    try:
        yield
    finally:
        del channel.create_publish_batch  # the class's own again
