"""A message left in kombu's unacked hash by a consumer that is gone comes back on every pool.

kombu's Redis transport moves a delivered message to its `unacked` hash and puts it back in the queue once it is
older than the visibility timeout (`restore_visible`). A prefork worker runs that restore on its event loop's
timer; a gevent, eventlet, threads or solo worker consumes through `drain_events`, which runs it only after a poll
that saw nothing at all, and its one-second BRPOP always answers first: measured, such a worker never restored a
message (no `unacked_mutex` in a 3-minute chaos run's AOF). A fleet of those lost every message a dead consumer
held. Here the message of a turn is put in the unacked hash as kombu would leave it when its consumer died.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.support.fake_anthropic import Script, text
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("pool", ["gevent", "threads"])
def test_a_message_a_dead_consumer_held_is_restored_and_runs(stack, pool):
    stack.fake_api.set_handler(Script([text("back")]))
    client = stack.client()
    r = redis.Redis.from_url(stack.redis_server.url)
    ref = client.send_message(f"c-{pool}", "hi")
    raw = r.rpop(stack.queue)  # what a BRPOP took, as the consumer that died did
    assert raw is not None and ref.task_id.encode() in raw
    message = json.loads(raw)
    tag, delivery = message["properties"]["delivery_tag"], message["properties"]["delivery_info"]
    r.hset("unacked", tag, json.dumps([message, delivery["exchange"], delivery["routing_key"]]))
    r.zadd("unacked_index", {tag: time.time() - 120})  # past the visibility timeout (60 s)
    stack.worker(pool=pool)
    assert client.wait(ref, timeout=30).reply == "back"
    # Run from its restored copy (same delivery tag), acknowledged once the task returns: no longer unacked.
    wait_until(lambda: not r.hexists("unacked", tag), timeout=10, what="the restored copy acknowledged")
