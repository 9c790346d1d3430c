"""Enqueueing a chat turn in one script: what it writes, and the failed last turn it hands back instead."""

from __future__ import annotations

import json

import fakeredis
import pytest

from tasks.store import keys
from tasks.store.enqueue import Enqueue, Enqueued
from tasks.store.fenced import Batch
from tasks.store.records import UnitRecord

OWNER = keys.owner("chat", "c1")


@pytest.fixture
def store():
    return fakeredis.FakeRedis()


def _fields(turn_id: str, text: str = "hello") -> dict[str, str]:
    return UnitRecord(kind="turn", owner_id=OWNER, unit_id=turn_id, text=text, task_id=f"task-{turn_id}").to_hash()


def _last_turn(store, turn_id: str, status: str) -> None:
    store.hset(keys.record(OWNER, turn_id), mapping={**_fields(turn_id), "status": json.dumps(status)})
    store.rpush(keys.turns(OWNER), turn_id)
    store.set(keys.round_slot(OWNER), "a stored round")


def test_a_new_turn_is_written_whole(store):
    found = Enqueue(store)(store, OWNER, "t1", _fields("t1"), '{"type":"turn.queued"}', 12.5, if_failed=True)
    assert found == Enqueued(ahead=0)
    assert UnitRecord.from_hash(store.hgetall(keys.record(OWNER, "t1"))) == UnitRecord.from_hash(_fields("t1"))
    assert store.lrange(keys.queue(OWNER), 0, -1) == [b"t1"] and store.lrange(keys.turns(OWNER), 0, -1) == [b"t1"]
    [(_, entry)] = store.xrange(keys.events(OWNER))
    assert entry == {b"e": b'{"type":"turn.queued"}'}
    assert store.zscore(keys.PENDING, OWNER) == 12.5


def test_a_failed_last_turn_is_handed_back_and_nothing_is_written(store):
    _last_turn(store, "t1", "failed")
    assert Enqueue(store)(store, OWNER, "t2", _fields("t2"), "{}", 1.0, if_failed=True) == Enqueued(failed_last="t1")
    assert not store.exists(keys.record(OWNER, "t2"), keys.queue(OWNER), keys.events(OWNER))
    assert store.llen(keys.turns(OWNER)) == 1 and store.zscore(keys.PENDING, OWNER) is None


@pytest.mark.parametrize(
    ("status", "if_failed", "round_kept"),
    [("failed", False, False), ("completed", True, False), ("stopped", True, False), ("running", True, True),
     ("queued", True, True), ("waiting", True, True)],
)
def test_a_finished_last_turns_round_is_dropped_an_unfinished_ones_kept(store, status, if_failed, round_kept):
    """An unfinished turn may still resume from its stored round; a new message invalidates a finished one's."""
    _last_turn(store, "t1", status)
    assert Enqueue(store)(store, OWNER, "t2", _fields("t2"), "{}", 1.0, if_failed=if_failed).failed_last is None
    assert store.lrange(keys.turns(OWNER), 0, -1) == [b"t1", b"t2"]
    assert bool(store.exists(keys.round_slot(OWNER))) is round_kept


def test_a_last_turn_without_a_record_counts_as_finished(store):
    store.rpush(keys.turns(OWNER), "gone")
    store.set(keys.round_slot(OWNER), "a stored round")
    assert Enqueue(store)(store, OWNER, "t2", _fields("t2"), "{}", 1.0, if_failed=True) == Enqueued(ahead=0)
    assert not store.exists(keys.round_slot(OWNER))


def test_a_turn_behind_an_unfinished_one_says_how_many_are_ahead(store):
    """The client publishes only a turn at the head; one behind is published by the settle of the turn ahead."""
    enqueue = Enqueue(store)
    assert enqueue(store, OWNER, "t1", _fields("t1"), "{}", 1.0, if_failed=True) == Enqueued(ahead=0)
    assert enqueue(store, OWNER, "t2", _fields("t2"), "{}", 1.0, if_failed=True) == Enqueued(ahead=1)
    assert enqueue(store, OWNER, "t3", _fields("t3"), "{}", 1.0, if_failed=True) == Enqueued(ahead=2)
    store.lrem(keys.queue(OWNER), 0, "t1")
    store.lrem(keys.queue(OWNER), 0, "t2")
    store.lrem(keys.queue(OWNER), 0, "t3")  # all settled
    assert enqueue(store, OWNER, "t4", _fields("t4"), "{}", 1.0, if_failed=True) == Enqueued(ahead=0)


MESSAGE = Batch().add("LPUSH", "celery", '{"body": "..."}').add("PUBLISH", "/0.celeryev/task.sent", '{"event": "sent"}')


def test_a_head_turns_task_message_is_published_by_its_enqueue(store):
    """Broker and store one Redis: the turn and its message in one script, the message only for the chat's head."""
    found = Enqueue(store)(store, OWNER, "t1", _fields("t1"), "{}", 1.0, if_failed=True, message=MESSAGE)
    assert found.published and found.ahead == 0
    assert store.lrange("celery", 0, -1) == [b'{"body": "..."}']
    behind = Enqueue(store)(store, OWNER, "t2", _fields("t2"), "{}", 2.0, if_failed=True, message=MESSAGE)
    assert not behind.published and behind.ahead == 1  # the settle of t1 publishes it
    assert store.llen("celery") == 1
    assert UnitRecord.from_hash(store.hgetall(keys.record(OWNER, "t2"))) == UnitRecord.from_hash(_fields("t2"))


def test_the_enqueue_says_how_many_heard_the_task_sent_event_it_published(store):
    """The event's PUBLISH kept as a read (`Publisher.prepared`): its reply comes back; without one, nothing does."""
    heard = Batch().add("LPUSH", "celery", "{}").read("PUBLISH", "/0.celeryev/task.sent", "{}")
    assert Enqueue(store)(store, OWNER, "t1", _fields("t1"), "{}", 1.0, if_failed=True, message=heard).listeners == 0
    other = keys.owner("chat", "c2")
    found = Enqueue(store)(store, other, "t1", _fields("t1"), "{}", 1.0, if_failed=True, message=MESSAGE)
    assert found.published and found.listeners is None  # no read: the event's reach is unknown


def test_nothing_is_published_by_an_enqueue_that_writes_nothing(store):
    _last_turn(store, "t1", "failed")
    found = Enqueue(store)(store, OWNER, "t2", _fields("t2"), "{}", 1.0, if_failed=True, message=MESSAGE)
    assert found == Enqueued(failed_last="t1") and not store.exists("celery")


def test_a_turn_that_takes_the_chats_agent_on_another_queue_is_left_to_the_caller(store):
    """The prepared message names the queue the caller picked; the chat's agent's queue is another: not published."""
    store.hset(keys.record(OWNER, "t0"), mapping={**_fields("t0"), "status": '"completed"', "agent": '"coder"',
                                                  "queue": '"coders"'})
    store.rpush(keys.turns(OWNER), "t0")
    found = Enqueue(store)(store, OWNER, "t1", _fields("t1"), "{}", 1.0, if_failed=True, message=MESSAGE)
    assert found.inherited and found.queue == "coders" and not found.published
    assert not store.exists("celery")
