"""A worker survives its broker restarting, and goes on taking turns without being restarted itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tasks.store import keys
from tests.conftest import Stack, _rabbitmq_or_skip
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import NEEDS_GEVENT, RedisServer, wait_until

pytestmark = pytest.mark.integration


def _reply(body: dict, index: int):
    return text("still here")


def test_a_worker_survives_a_redis_restart_and_takes_the_next_turn(redis_aof: RedisServer, fake_api, tmp_path: Path):
    """kill -9 and restart the Redis that is store and broker (AOF): the worker reconnects (no "Unrecoverable
    error": kombu's closed-channel AttributeError is a connection error now) and completes the next turn."""
    stack = Stack(redis_aof, fake_api, tmp_path)
    try:
        fake_api.set_handler(_reply)
        worker = stack.worker("a")
        client = stack.client()
        assert client.wait(client.send_message("restart", "before"), timeout=60).status == "completed"
        client.close()
        redis_aof.restart(kill=True)
        client = stack.client()
        result = client.wait(client.send_message("restart", "after"), timeout=60)
        assert result.status == "completed" and result.reply == "still here"
        assert worker.alive and "Unrecoverable error" not in worker.log()
    finally:
        stack.stop()


def test_a_worker_survives_a_rabbitmq_restart_and_takes_the_next_turn(redis_server, fake_api, tmp_path: Path):
    """Stop and start the RabbitMQ node (same ports, same data: the durable quorum queue survives): the worker
    reconnects and completes the next turn."""
    node = _rabbitmq_or_skip(tmp_path / "rabbitmq")
    stack = Stack(redis_server, fake_api, tmp_path)
    stack.env["BATON_BROKER_URL"] = node.url
    try:
        fake_api.set_handler(_reply)
        worker = stack.worker("a")
        client = stack.client()
        assert client.wait(client.send_message("restart", "before"), timeout=60).status == "completed"
        node.stop()
        node.start()
        client = stack.client()
        result = client.wait(client.send_message("restart", "after"), timeout=90)
        assert result.status == "completed" and result.reply == "still here"
        assert worker.alive and "Unrecoverable error" not in worker.log()
    finally:
        stack.stop()
        node.stop()


@NEEDS_GEVENT
def test_a_gevent_worker_s_units_keep_their_leases_while_its_broker_is_down(redis_server, fake_api, tmp_path: Path):
    """The store stays up, the broker (a Redis of its own) goes down for 7 s while a turn is inside a write tool.
    Celery's consumer retries the broker, waiting 2 s, then 4: under the gevent pool those waits stood the whole
    process still, so its poller renewed no lease, the 3 s lease lapsed under the running tool, and another worker
    could have run the unit beside it (the chaos run saw just that). Now the lease is renewed all through, and the
    turn ends once with its one write."""
    broker = RedisServer(tmp_path / "broker").start()
    stack = Stack(redis_server, fake_api, tmp_path)
    stack.env.update(BATON_BROKER_URL=broker.url, BATON_LEASE_TTL="3")
    store = redis.Redis.from_url(redis_server.url)
    try:
        fake_api.set_handler(Script([tool_call("blocking_write", {"note": "n1"}), text("Written.")]))
        worker = stack.worker("g", pool="gevent")
        client = stack.client()
        ref = client.send_message("outage", "write it down")
        assert store.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # inside its tool
        broker.kill9()
        wait_until(lambda: "Trying again in 4.00 seconds" in worker.log(), timeout=20, what="the second retry wait")
        lowest, until = 3000, time.monotonic() + 3
        while time.monotonic() < until:  # the second wait, 4 s: past a whole lease had the process stood still
            lowest = min(lowest, store.pttl(keys.lease("chat:outage")))
            time.sleep(0.05)
        broker.start()
        store.rpush(counting_tools.RELEASE_KEY, "go")
        result = client.wait(ref, timeout=60)
        assert lowest > 1000, f"the lease ran down to {lowest} ms while the broker was down"
        assert result.status == "completed" and result.reply == "Written."
        assert counting_tools.calls(store, "blocking_write") == 1
        assert "the beat came" not in worker.log()
    finally:
        stack.stop()
        broker.stop()
