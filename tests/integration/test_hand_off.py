"""Hand-off, end to end: a turn queued behind a running one keeps no message in the broker (it does not poll);
the running turn's settle starts it."""

from __future__ import annotations

import time

import pytest
import redis

from tasks.runtime.sweeper import KOMBU_UNACKED
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call

pytestmark = pytest.mark.integration


def test_a_queued_turn_waits_without_a_message_and_the_heads_settle_starts_it(stack):
    """While turn 1 is held inside its tool, turn 2 has no message at all: the client publishes only a turn at
    its chat's head, so nothing of turn 2 is in the queue, among the unacked, or received (a polling turn always
    has its next copy there). Releasing turn 1 starts turn 2 at once, through turn 1's settle, and the two
    complete in order."""
    stack.fake_api.set_handler(
        Script([tool_call("blocking_write", {"note": "n1"}), text("first done"), text("second done")])
    )
    worker = stack.worker()
    client = stack.client()
    r = redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)
    t1 = client.send_message("c1", "first")
    t2 = client.send_message("c1", "second")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # turn 1 is inside its tool

    def t2_in_broker() -> bool:
        held = [*r.lrange(stack.queue, 0, -1), *r.hvals(KOMBU_UNACKED)]
        return any(t2.task_id.encode() in m for m in held)

    received = f"baton.chat_turn[{t2.task_id}] received"
    # An absence has no event to await: watch a window in which a published copy would have been received, and
    # a 0.2 s poll would have come back 5 times.
    time.sleep(1.0)
    assert received not in worker.log() and not t2_in_broker()
    assert client.turn("c1", t2.turn_id).status == "queued"

    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert client.wait(t1, timeout=30).status == "completed"
    assert client.wait(t2, timeout=30).reply == "second done"
    order = [(e.type, e.turn_id) for e in client.events("c1") if e.type in ("turn.started", "turn.completed")]
    assert order == [
        ("turn.started", t1.turn_id),
        ("turn.completed", t1.turn_id),
        ("turn.started", t2.turn_id),
        ("turn.completed", t2.turn_id),
    ]
    assert worker.log().count(received) == 1  # the hand-off's: its only message


def test_a_head_turns_message_rides_its_enqueue_and_runs(stack, monkeypatch):
    """Broker and store one Redis: the turn's task message is in the broker's queue as soon as `send_message`
    returns, with no publish of the client's own (counted), and a worker runs it; a turn behind it is published
    by the head's settle, as before."""
    from tasks.client.publisher import Publisher

    stack.fake_api.set_handler(Script([text("first done"), text("second done")]))
    client = stack.client()
    published: list[str] = []
    real = Publisher.publish
    monkeypatch.setattr(Publisher, "publish", lambda self, rec, task_id: published.append(task_id) or real(
        self, rec, task_id))
    r = redis.Redis.from_url(stack.redis_server.url)
    t1 = client.send_message("c-ride", "first")
    t2 = client.send_message("c-ride", "second")
    queued = r.lrange(stack.queue, 0, -1)
    assert [t1.task_id.encode() in m for m in queued] == [True]  # the head's message only, and not the client's
    assert published == []
    stack.worker()
    assert client.wait(t1, timeout=30).reply == "first done"
    assert client.wait(t2, timeout=30).reply == "second done"
