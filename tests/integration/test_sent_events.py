"""Flower's task-sent event goes out with a send while an event receiver hears it, and is left out while none does.

On a real redis-server with a real worker (whose own subscriptions are not an event receiver's), and a real receiver
as Flower and `celery events` run one (Celery's `app.events.Receiver`), the broker the store itself (the event rides
the enqueue script) or a Redis of its own (here another database of the same server: kombu's batch sends it).
MONITOR counts the task-sent PUBLISHes; the client's clock for its re-checks is the test's
(tasks/client/sent_events.py).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis
from celery import Celery

from tasks.client.publisher import Publisher
from tasks.client.sent_events import RECHECK_SECONDS
from tests.support import monitor
from tests.support.fake_anthropic import text
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration


class EventReceiver:
    """Celery's event receiver on a thread, as Flower runs one: the task ids of the task-sent events it heard."""

    def __init__(self, url: str) -> None:
        self.app = Celery(broker=url, set_as_current=False)
        self.heard: list[str] = []
        self._connection = self.app.connection_for_read()
        self._receiver = self.app.events.Receiver(
            self._connection, handlers={"task-sent": lambda event: self.heard.append(event["uuid"])}
        )
        self._thread = threading.Thread(target=self._receiver.capture, kwargs={"wakeup": False}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._receiver.should_stop = True
        self._thread.join(10)
        self._connection.release()


def _task_sent(entries: list[dict[str, Any]]) -> int:
    """The task-sent events published, by a script or a client."""
    return sum(1 for e in entries if e["command"].startswith("PUBLISH") and "celeryev/task.sent" in e["command"])


def _turns(client: Any, prefix: str, n: int) -> list[str]:
    """`n` turns sent and waited for; their task ids."""
    ids = []
    for i in range(n):
        ref = client.send_message(f"{prefix}-{i}", "hello")
        assert client.wait(ref, timeout=60).status == "completed"
        ids.append(ref.task_id)
    return ids


async def _async_turns(stack: Any, prefix: str, n: int) -> list[str]:
    """`_turns` through an `AsyncClient` (a web app's), which learns who hears on its own."""
    async with stack.async_client() as client:
        ids = []
        for i in range(n):
            ref = await client.send_message(f"{prefix}-{i}", "hello")
            assert (await client.wait(ref, timeout=60)).status == "completed"
            ids.append(ref.task_id)
        return ids


def _counted(url: str, client: Any, prefix: str, n: int, stack: Any = None) -> tuple[list[str], int]:
    """`_turns` (with `stack`, `_async_turns`), and how many task-sent events were published meanwhile."""
    probe, address = monitor.probe(url)
    watching = monitor.Monitor(url, address)
    try:
        probe.echo(monitor.START)
        ids = _turns(client, prefix, n) if stack is None else asyncio.run(_async_turns(stack, prefix, n))
        probe.echo(monitor.END)
    finally:
        watching.close()
        probe.close()
    return ids, _task_sent(watching.seen)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broker", ["the store", "its own"])
def test_the_task_sent_event_goes_out_while_a_receiver_hears_it(stack, monkeypatch, broker):
    """With nobody listening (a worker running), the first send's event reaches no one and the sends after it leave
    it out, the sync client's as the asyncio client's; a receiver that comes is heard from the first send after the
    re-check on, every send's event."""
    now = [1000.0]
    monkeypatch.setattr(Publisher, "_now", staticmethod(lambda: now[0]))
    url = stack.redis_server.url
    broker_url = url if broker == "the store" else url.rsplit("/", 1)[0] + "/1"
    stack.env["BATON_BROKER_URL"] = broker_url
    stack.fake_api.set_handler(lambda body, index: text("ok"))
    stack.worker(concurrency=1)
    client = stack.client()
    assert client._publisher.broker_is_store == (broker == "the store")

    _, published = _counted(url, client, "alone", 4)
    assert published == 1  # the first send's, which found no receiver
    _, published = _counted(url, None, "alone-async", 3, stack)
    assert published == 1  # the asyncio client's first

    patterns = redis.Redis.from_url(url)
    before = patterns.pubsub_numpat()  # the worker's own (its pidbox's), which the events above did not match
    receiver = EventReceiver(broker_url)
    try:
        wait_until(lambda: patterns.pubsub_numpat() > before, 30, 0.05, "the receiver subscribed")
        _, published = _counted(url, client, "before-the-check", 2)
        assert published == 0  # within the window: the receiver is not known yet

        now[0] += RECHECK_SECONDS
        ids, published = _counted(url, client, "heard", 3)
        assert published == 3
        wait_until(lambda: set(ids) <= set(receiver.heard), 30, 0.05, "every task-sent event heard")
    finally:
        receiver.close()
        patterns.close()
