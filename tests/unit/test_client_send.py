"""`send_message` in one script: a new turn, or the chat's failed last turn retried when its text comes again."""

from __future__ import annotations

import json

import fakeredis
import pytest

from config.settings import Settings
from tasks.client import Client
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.records import UnitRecord

OWNER = keys.owner("chat", "c1")


class FakePublisher:
    """A broker that is not the store: nothing rides the enqueue, every publish is `send`'s."""

    broker_is_store = False

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def prepared(self, rec: UnitRecord, task_id: str) -> Batch:
        return Batch()

    def heard(self, receivers: int | None) -> None:
        assert receivers is None  # nothing rode the enqueue

    def send(self, store, rec: UnitRecord, task_id: str | None = None) -> None:
        self.sent.append((rec.unit_id, task_id or rec.task_id))


@pytest.fixture
def client():
    c = Client(Settings(redis_url="redis://127.0.0.1:1/0"))
    c.redis = fakeredis.FakeRedis()
    c._publisher = FakePublisher()  # type: ignore[assignment]
    yield c
    c.close()


def _fail(client, turn_id: str) -> None:
    """As a settle fails a turn: its record says so and it leaves the chat's queue."""
    client.redis.hset(keys.record(OWNER, turn_id), mapping={"status": json.dumps("failed")})
    client.redis.lrem(keys.queue(OWNER), 0, turn_id)


def test_resending_a_failed_turns_text_retries_it_and_other_text_is_a_new_turn(client):
    first = client.send_message("c1", "what is  a?")
    assert client._publisher.sent == [(first.turn_id, first.task_id)]
    _fail(client, first.turn_id)
    again = client.send_message("c1", " what is a? ")  # whitespace aside, the same text: a retry
    assert again.turn_id == first.turn_id and again.task_id != first.task_id
    assert client.redis.lrange(keys.turns(OWNER), 0, -1) == [first.turn_id.encode()]
    _fail(client, first.turn_id)
    other = client.send_message("c1", "something else")
    assert other.turn_id != first.turn_id
    assert client.redis.lrange(keys.turns(OWNER), 0, -1) == [first.turn_id.encode(), other.turn_id.encode()]
    assert client._publisher.sent[-1] == (other.turn_id, other.task_id)
    assert client.turn("c1", other.turn_id).status == "queued"


def test_a_turn_behind_an_unfinished_one_is_not_published_until_the_turn_ahead_settles(client):
    """Its message would only be delivered, found not at the head and dropped: the settle ahead publishes it."""
    first = client.send_message("c1", "one")
    second = client.send_message("c1", "two")
    assert client._publisher.sent == [(first.turn_id, first.task_id)]
    assert client.turn("c1", second.turn_id).status == "queued"
    _fail(client, first.turn_id)
    _fail(client, second.turn_id)
    third = client.send_message("c1", "three")  # nothing unfinished ahead: at the head, published at once
    assert client._publisher.sent[-1] == (third.turn_id, third.task_id)
