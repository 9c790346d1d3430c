"""A worker survives its broker restarting, and goes on taking turns without being restarted itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Stack, _rabbitmq_or_skip
from tests.support.fake_anthropic import text
from tests.support.processes import RedisServer

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
