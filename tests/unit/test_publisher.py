"""The client's publish: task message and task-sent event in one batch; a batch that may have failed goes again."""

from __future__ import annotations

import contextlib
import types

from kombu.exceptions import BatchPublishError
from kombu.transport import redis as kombu_redis

from config.settings import Settings
from tasks.client.publisher import Publisher
from tasks.runtime import kombu_fixes
from tasks.store import keys
from tasks.store.records import UnitRecord

REC = UnitRecord(kind="turn", owner_id=keys.owner("chat", "c1"), unit_id="t1", task_id="task-1")


class FakeProducer:
    channel = None  # not a Redis channel: nothing to hear how many received the event

    def __init__(self, flush_fails: bool) -> None:
        self.flush_fails = flush_fails

    @contextlib.contextmanager
    def batch(self):
        yield
        if self.flush_fails:
            raise BatchPublishError("Redis publish batch failed; delivery is uncertain")


class FakeCelery:
    def __init__(self, flush_fails: bool) -> None:
        self.producer = FakeProducer(flush_fails)
        self.sent: list[tuple[str, list[str], str, object]] = []

    @contextlib.contextmanager
    def producer_or_acquire(self):
        yield self.producer

    def send_task(self, name, args, task_id, queue, producer=None, headers=None, **reprs):
        self.sent.append((name, args, task_id, producer))
        self.headers = headers


def _publisher(flush_fails: bool) -> tuple[Publisher, FakeCelery]:
    publisher = Publisher(Settings(redis_url="redis://127.0.0.1:1/0", queue="q"))
    fake = FakeCelery(flush_fails)
    publisher.celery = fake  # type: ignore[assignment]
    return publisher, fake


def test_the_task_is_sent_in_a_batch_of_its_producer():
    publisher, fake = _publisher(flush_fails=False)
    publisher.publish(REC, "task-1")
    assert fake.sent == [("baton.chat_turn", ["c1", "t1"], "task-1", fake.producer)]


def test_a_batch_that_may_not_have_been_delivered_is_published_again_the_ordinary_way():
    """Better twice (a copy of a unit's message is turned away) than never."""
    publisher, fake = _publisher(flush_fails=True)
    publisher.publish(REC, "task-1")
    assert fake.sent == [("baton.chat_turn", ["c1", "t1"], "task-1", fake.producer),
                         ("baton.chat_turn", ["c1", "t1"], "task-1", None)]


class FakeChannel:
    """What the shared-client fix reads of kombu's Redis channel: its pool, and how it builds a client."""

    conn_or_acquire = kombu_fixes._conn_or_acquire_one_client

    def __init__(self) -> None:
        self.pool = object()
        self.built = 0

    def _create_client(self):
        self.built += 1
        return types.SimpleNamespace(connection_pool=self.pool)


def test_a_channel_builds_one_redis_client_per_pool_not_one_per_publish():
    channel = FakeChannel()
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second
    assert channel.built == 1
    channel.pool = object()  # rebuilt after a disconnect: the old client's pool is gone
    with channel.conn_or_acquire() as third:
        assert third is not first and third.connection_pool is channel.pool
    given = object()
    with channel.conn_or_acquire(given) as passed:
        assert passed is given
    assert channel.built == 2


def test_the_fix_is_installed_on_kombus_redis_channel():
    Publisher(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert kombu_redis.Channel.conn_or_acquire is kombu_fixes._conn_or_acquire_one_client
