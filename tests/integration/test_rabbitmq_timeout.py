"""A run held past RabbitMQ's `consumer_timeout`: the worker survives the channel close, the unit runs once.

On 3.10 the timeout is node-wide and checked on each channel's tick, so this module's node lowers both
(3 s timeout, 0.5 s tick; advanced.config). When it fires the broker closes the consumer's channel and
requeues the message: with `broker_channel_error_retry` the worker reconnects instead of dying with
"Unrecoverable error" (celery#6760), the redelivered copy finds the unit's lease held by the execution still
running and is dropped, and the first execution finishes the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import Stack, _rabbitmq_or_skip
from tests.support import counting_tools
from tests.support.fake_anthropic import text, tool_call
from tests.support.processes import wait_until
from tests.support.rabbitmq import RabbitMQNode

pytestmark = pytest.mark.integration

TIMEOUT_MS = 3000
TIMED_OUT = "delivery acknowledgement on channel"


@pytest.fixture(scope="module")
def impatient_rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQNode]:
    node = _rabbitmq_or_skip(tmp_path_factory.mktemp("rabbitmq-timeout"), consumer_timeout_ms=TIMEOUT_MS,
                             channel_tick_ms=500)
    yield node
    node.stop()


def test_a_run_held_past_the_consumer_timeout_completes_once_and_its_worker_keeps_consuming(
    impatient_rabbitmq: RabbitMQNode, redis_server, fake_api, tmp_path: Path
):
    """A write tool holds the run's message unacknowledged past the broker's consumer timeout: the broker
    closes the channel and redelivers; the worker stays alive and consuming (a chat turn sent meanwhile
    completes), the redelivered copy is turned away by the lease, the write runs once and the run completes
    with no interruption counted."""
    stack = Stack(redis_server, fake_api, tmp_path)
    stack.env["BATON_BROKER_URL"] = impatient_rabbitmq.url
    try:
        def answer(body: dict, index: int):
            if "the long run" not in str(body["messages"][0]):
                return text("turn done")
            first = len(body["messages"]) == 1
            return tool_call("blocking_write", {"note": "slow"}) if first else text("long run done")

        fake_api.set_handler(answer)
        worker = stack.worker("a")
        client = stack.client()
        r = redis.Redis.from_url(redis_server.url, socket_timeout=None)
        ref = client.start_run("the long run", workspace=tmp_path)
        assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # the write is running
        wait_until(lambda: TIMED_OUT in worker.log(), 30, what="the broker's consumer timeout to close the channel")
        wait_until(lambda: "a live execution of this unit holds its lease" in worker.log(), 30,
                   what="the redelivered copy to be turned away by the lease")
        assert worker.alive, worker.log()[-3000:]

        turn = client.wait(client.send_message("meanwhile", "still there?"), timeout=30)
        assert turn.status == "completed" and turn.reply == "turn done"

        r.rpush(counting_tools.RELEASE_KEY, "go")
        status = client.wait(ref, timeout=60)
        assert status.status == "completed" and status.reply == "long run done"
        assert status.interruptions == 0
        assert counting_tools.calls(r, "blocking_write") == 1
        assert worker.alive
        assert "Unrecoverable error" not in worker.log()
        impatient_rabbitmq.wait_for_messages(stack.queue, 0)
    finally:
        stack.stop()
