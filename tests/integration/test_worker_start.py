"""A worker started while what it needs is down: it says, in one line, what it cannot reach, and goes on once
that is back (the lead's side covers the CLI, the client and the HTTP API)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from config.topology import dead_letter_queue_name
from tests.conftest import Stack
from tests.support.fake_anthropic import Script, text
from tests.support.processes import RedisServer, Worker, wait_until
from tests.support.rabbitmq import RabbitMQNode, find_rabbitmq_server

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-store-pw"


def test_a_worker_started_while_its_store_is_down_says_so_and_takes_a_turn_once_it_is_up(
    redis_server: RedisServer, fake_api, tmp_path: Path
):
    """The store (a password-protected Redis) is not running; the broker (another Redis) is. The worker starts
    and logs one line naming the store's address (not its password) as unreachable; once redis-server starts on
    that port the worker's sweeps say it is reached again, and a turn sent then completes."""
    store = RedisServer(tmp_path / "store", password=PASSWORD)  # not started yet: its port is closed
    stack = Stack(store, fake_api, tmp_path)
    stack.env["BATON_BROKER_URL"] = redis_server.url
    try:
        fake_api.set_handler(Script([text("the store is back")]))
        worker = stack.worker("a")
        wait_until(lambda: "cannot reach the store" in worker.log(), 30, what="the worker to say the store is down")
        [line] = [x for x in worker.log().splitlines() if "cannot reach the store" in x]
        assert f"127.0.0.1:{store.port}/0" in line and "retrying" in line
        store.start()
        wait_until(lambda: "reached the store" in worker.log(), 30, what="the worker to reach the store")
        client = stack.client()
        result = client.wait(client.send_message("late-store", "are you there?"), timeout=60)
        assert result.status == "completed" and result.reply == "the store is back"
        assert worker.alive
        log = worker.log()
        assert PASSWORD not in log
        assert "Signal handler" not in log  # no start-up hook failed on the way
    finally:
        stack.stop()
        store.stop()


def test_a_worker_started_while_rabbitmq_is_down_says_so_and_declares_its_dead_letters_once_it_is_up(
    redis_server: RedisServer, fake_api, tmp_path: Path
):
    """RabbitMQ is not running when the worker starts: from its first second the worker says it cannot connect
    to the broker (named, without the password) and retries; once the node is up it consumes, has declared the
    dead-letter queue (before, the declaration waited silently for ~2 min and then gave up), and takes a turn."""
    if find_rabbitmq_server() is None:
        pytest.skip("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server; .ci/run does)")
    node = RabbitMQNode(tmp_path / "rabbitmq")  # not started yet: its ports are closed
    stack = Stack(redis_server, fake_api, tmp_path)
    stack.env["BATON_BROKER_URL"] = node.url
    log_path = tmp_path / "worker-a.log"  # where Worker("a") writes

    def start_the_node_once_the_worker_complains() -> None:
        wait_until(lambda: log_path.exists() and "Cannot connect to amqp://" in log_path.read_text(), 60,
                   what="the worker to say RabbitMQ is down")
        node.start()

    try:
        fake_api.set_handler(Script([text("rabbit is back")]))
        starter = threading.Thread(target=start_the_node_once_the_worker_complains, daemon=True)
        starter.start()
        worker = Worker("a", stack.env, tmp_path)
        stack.workers.append(worker)
        # Ready only once it consumes from the node: its boot, then Celery's next retry (2, 4, 6... s apart).
        worker.start(timeout=120)
        starter.join(timeout=60)
        [first, *_] = [x for x in worker.log().splitlines() if "Cannot connect to amqp://" in x]
        assert f"127.0.0.1:{node.port}" in first and "guest:guest@" not in first
        assert dead_letter_queue_name(stack.queue) in node.queues()
        client = stack.client()
        result = client.wait(client.send_message("late-rabbit", "are you there?"), timeout=60)
        assert result.status == "completed" and result.reply == "rabbit is back"
        assert worker.alive and "Signal handler" not in worker.log()
    finally:
        stack.stop()
        node.stop()


def test_a_worker_says_ready_once_its_agents_are_published(stack: Stack) -> None:
    """Clients check a named agent against what the workers publish: a worker's "ready." comes after its agents are
    published (it said so before that, and a client sending as soon as it read it was refused: "unknown agent")."""
    worker = stack.worker("a")
    log = worker.log()
    published = log.find(f"agents: {worker.hostname} serves default")
    assert published != -1 and published < log.find(" ready."), log[-2000:]
    assert [a["name"] for a in stack.client().agents()["agents"]] == ["default"]
