"""The sweeps' decisions on a fake store: what is requeued, republished, or left alone."""

from __future__ import annotations

import time

import fakeredis
import pytest

from config.settings import Settings
from tasks.runtime.sweeper import pending_check_seconds, sweep_lost_messages, sweep_once
from tasks.store import keys
from tasks.store.records import UnitRecord


class FakeApp:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list, str | None]] = []

    def send_task(self, name, args, task_id=None, queue=None, headers=None):
        self.sent.append((name, args, task_id))
        self.headers = headers


@pytest.fixture
def store():
    return fakeredis.FakeRedis()


SETTINGS = Settings(redis_url="redis://fake:6379/0", queue="q", lease_ttl=3)


def _run(store, status: str = "queued", task_id: str = "task-1", queue: str | None = None) -> str:
    owner = keys.owner("run", "r1")
    rec = UnitRecord(kind="run", owner_id=owner, unit_id="r1", status=status, task_id=task_id, text="goal",
                     queue=queue)
    store.hset(keys.record(owner, "r1"), mapping=rec.to_hash())
    return owner


def test_an_unstarted_unit_whose_message_vanished_is_republished_once(store):
    """A queued run whose message is neither in the queue nor unacked is republished under its task id,
    and a second sweep right after does not publish it again."""
    owner = _run(store)
    now = time.time()
    store.zadd(keys.PENDING, {owner: now - pending_check_seconds(SETTINGS) - 1})
    app = FakeApp()
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == [owner]
    assert app.sent == [("baton.coding_run", ["r1"], "task-1")]
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now + 1) == []


def test_a_unit_whose_message_is_queued_or_unacked_is_left_alone(store):
    """The message is still in the broker (queued, or held by a worker): nothing is republished."""
    owner = _run(store)
    now = time.time()
    store.zadd(keys.PENDING, {owner: now - 100})
    store.lpush("q", b'{"headers": {"id": "task-1"}}')
    app = FakeApp()
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == []
    store.delete("q")
    store.hset("unacked", "tag", b'[{"headers": {"id": "task-1"}}]')
    store.zadd(keys.PENDING, {owner: now - 100})
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == []
    assert app.sent == []


def test_a_unit_waiting_in_its_agents_queue_is_left_alone(store):
    """A unit of an agent with a queue of its own waits in that queue (behind others, its workers busy): its message
    is looked for there, not in this worker's queue. Red before: each sweep found it "lost" and republished a copy,
    one more per lease period for as long as the backlog lasted."""
    owner = _run(store, queue="gpu")
    now = time.time()
    store.zadd(keys.PENDING, {owner: now - 100})
    store.lpush("gpu", b'{"headers": {"id": "task-1"}}')
    app = FakeApp()
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == []
    assert app.sent == []
    store.delete("gpu")  # gone from its queue too: lost, republished (to its queue, by `publish`)
    store.zadd(keys.PENDING, {owner: now - 100})
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == [owner]


def test_finished_units_leave_the_pending_set(store):
    """A unit with nothing left to start is forgotten, not republished."""
    owner = _run(store, status="completed")
    store.zadd(keys.PENDING, {owner: time.time() - 100})
    app = FakeApp()
    assert sweep_lost_messages(store, store, app, SETTINGS) == []
    assert store.zcard(keys.PENDING) == 0 and app.sent == []


def test_with_no_redis_broker_to_look_in_nothing_is_republished_and_finished_units_are_forgotten(store):
    """RabbitMQ (broker None): an unstarted unit is never republished (its message cannot be looked for, and a
    copy while it is queued would be a duplicate), but finished owners still leave the pending set."""
    unstarted = _run(store)
    done = keys.owner("run", "r2")
    rec = UnitRecord(kind="run", owner_id=done, unit_id="r2", status="completed", task_id="t2", text="goal")
    store.hset(keys.record(done, "r2"), mapping=rec.to_hash())
    store.zadd(keys.PENDING, {unstarted: time.time() - 100, done: time.time() - 100})
    app = FakeApp()
    assert sweep_lost_messages(store, None, app, SETTINGS) == []
    assert app.sent == [] and [m.decode() for m in store.zrange(keys.PENDING, 0, -1)] == [unstarted]


def test_a_running_unit_with_an_expired_lease_is_requeued_as_an_interruption(store):
    """The lease sweep requeues a running unit whose heartbeat stopped, counting one interruption."""
    owner = _run(store, status="running")
    store.zadd(keys.ACTIVE, {owner: time.time() - 10})
    app = FakeApp()
    assert sweep_once(store, app, SETTINGS) == [owner]
    assert app.sent == [("baton.coding_run", ["r1"], "task-1")]
    assert int(store.hget(keys.record(owner, "r1"), "interruptions")) == 1
    assert sweep_once(store, app, SETTINGS) == []  # once


def test_a_live_unit_is_not_swept(store):
    """A stale heartbeat score with the lease still held (a slow beat) is not a lost worker."""
    owner = _run(store, status="running")
    store.zadd(keys.ACTIVE, {owner: time.time() - 10})
    store.set(keys.lease(owner), "r1|w@h|x|y", px=3000)
    app = FakeApp()
    assert sweep_once(store, app, SETTINGS) == [] and app.sent == []


def test_a_unit_lost_past_the_limit_is_failed_and_its_waiters_are_signalled(store):
    owner = _run(store, status="running")
    store.hset(keys.record(owner, "r1"), "interruptions", str(SETTINGS.max_interruptions))
    store.zadd(keys.ACTIVE, {owner: time.time() - 10})
    app = FakeApp()
    assert sweep_once(store, app, SETTINGS) == []  # failed, not requeued
    assert store.hget(keys.record(owner, "r1"), "status") == b'"failed"' and app.sent == []
    assert [fields for _, fields in store.xrange(keys.settled(owner))] == [{b"u": b"r1"}]
