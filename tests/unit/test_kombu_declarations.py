"""A declaration a connection already made is found in its cache without kombu binding a copy of the entity first
(tasks/runtime/kombu_fixes.py), and one it has not made, or made before it reconnected, is made as before.

Through kombu's own in-memory transport: a real `Connection`, `Producer` and `Queue`, the binds and declarations
counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Exchange, Producer, Queue, messaging

from tasks.runtime import kombu_fixes


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of `Queue.bind` (kombu's copy of the entity, bound to a channel) and `Queue.declare`."""
    counts = {"bind": 0, "declare": 0}
    bind, declare = Queue.bind, Queue.declare

    def counting_bind(self: Queue, channel: Any) -> Any:
        counts["bind"] += 1
        return bind(self, channel)

    def counting_declare(self: Queue, *args: Any, **kwargs: Any) -> Any:
        counts["declare"] += 1
        return declare(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "bind", counting_bind)
    monkeypatch.setattr(Queue, "declare", counting_declare)
    yield counts


def publish(connection: Connection, queue: Queue, times: int) -> None:
    producer = Producer(connection.channel())
    for n in range(times):
        producer.publish({"n": n}, exchange="", routing_key=queue.name, declare=[queue], retry=True,
                         serializer="json")


def test_a_queue_declared_on_the_connection_is_not_bound_again_for_each_publish(counted: dict[str, int]) -> None:
    queue = Queue("baton-declared", Exchange("baton-declared", type="direct"), routing_key="baton-declared")
    with Connection("memory://") as connection:
        publish(connection, queue, 5)
    assert counted == {"bind": 1, "declare": 1}


def test_a_connection_that_reconnected_declares_again(counted: dict[str, int]) -> None:
    queue = Queue("baton-again", Exchange("baton-again", type="direct"), routing_key="baton-again")
    with Connection("memory://") as connection:
        publish(connection, queue, 2)
        connection.close()  # kombu empties the connection's cache of declarations
        connection.connect()
        publish(connection, queue, 2)
    assert counted["declare"] == 2


def test_an_entity_kombu_does_not_cache_goes_kombus_way_each_time(counted: dict[str, int]) -> None:
    queue = Queue("baton-auto-delete", Exchange("baton-auto-delete", type="direct"), routing_key="baton-auto-delete",
                  auto_delete=True)
    with Connection("memory://") as connection:
        publish(connection, queue, 3)
    assert counted["declare"] == 3


def test_the_fix_is_installed_on_kombus_producer() -> None:
    assert messaging.Producer.maybe_declare is kombu_fixes._maybe_declare_unless_cached
