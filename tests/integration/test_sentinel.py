"""The store behind Redis Sentinel: a master killed with -9 and its replica promoted, workers not restarted.

A private master + replica + Sentinel (tests/support/sentinel.py); the store, the Celery broker and the
result backend all go through the Sentinel. The write tools count their calls in a separate plain Redis,
so the count survives the failover whatever it loses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tasks.store.failover import FAILOVER_NOTICE
from tests.conftest import Stack
from tests.support import counting_tools
from tests.support.processes import RedisServer
from tests.support.sentinel import MASTER_NAME, ReplicatedRedis

pytestmark = pytest.mark.integration


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    store = ReplicatedRedis(tmp_path / "replicated").start()
    yield store
    store.stop()


def _sentinel_stack(replicated: ReplicatedRedis, redis_server: RedisServer, fake_api, tmp_path: Path) -> Stack:
    stack = Stack(redis_server, fake_api, tmp_path)  # redis_server: only the counters of the write tools
    stack.env.update(
        {
            "BATON_REDIS_URL": "redis://ignored.invalid:1/0",  # host and port come from the Sentinel
            "BATON_REDIS_SENTINELS": replicated.sentinels,
            "BATON_REDIS_MASTER": MASTER_NAME,
            "BATON_TEST_COUNTER_URL": redis_server.url,
            "BATON_LEASE_TTL": "5",
        }
    )
    return stack


def test_a_write_tool_whose_write_ahead_entry_no_replica_confirms_is_not_run_and_the_run_says_why(
    replicated: ReplicatedRedis, redis_server: RedisServer, fake_api, tmp_path: Path
):
    """Behind Sentinel a write tool runs only once a replica has its write-ahead entry (WAIT): with the replica
    stopped, the run fails before the tool runs, its failure naming the tool and the unconfirmed replication
    (never silent), and the tool count stays 0; with the replica back, a retry runs the tool once."""
    stack = _sentinel_stack(replicated, redis_server, fake_api, tmp_path)
    counter = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:
        from tests.support.fake_anthropic import text, tool_call

        fake_api.set_handler(
            lambda body, index: tool_call("record_note", {"note": "n"}) if len(body["messages"]) == 1 else text("ok")
        )
        stack.worker("a")
        client = stack.client()
        replicated.pause_replica()
        try:
            status = client.wait(client.start_run("note it", workspace=tmp_path), timeout=60)
        finally:
            replicated.resume_replica()
        assert status.status == "failed", status
        assert status.failure is not None and "record_note" in status.failure["message"]
        assert "replicas confirmed" in status.failure["message"]
        assert counting_tools.calls(counter, "record_note") == 0
        again = client.wait(client.retry(status.run_id), timeout=60)
        assert again.status == "completed" and again.reply == "ok"
        assert counting_tools.calls(counter, "record_note") == 1
    finally:
        stack.stop()


def test_turns_and_a_run_go_on_after_the_master_is_killed_and_the_replica_promoted(
    replicated: ReplicatedRedis, redis_server: RedisServer, fake_api, tmp_path: Path
):
    """Turns complete before the failover; a run whose write tool is mid-call when the master is killed (its
    writes replicated first: WAIT 1) completes afterwards with the write run once, its outcome stating the
    failover; turns sent after the promotion complete on the same, never restarted, worker."""
    stack = _sentinel_stack(replicated, redis_server, fake_api, tmp_path)
    counter = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:

        def answer(body: dict, index: int):
            from tests.support.fake_anthropic import text, tool_call

            first = str(body["messages"][0])
            if "across the failover" in first:
                return tool_call("blocking_write", {"note": "once"}) if len(body["messages"]) == 1 else text("ran")
            return text("reply")

        fake_api.set_handler(answer)
        worker = stack.worker("a")
        client = stack.client()
        for n in range(2):
            assert client.wait(client.send_message("before", f"hello {n}"), timeout=60).status == "completed"

        ref = client.start_run("write across the failover", workspace=tmp_path)
        assert counter.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
        assert replicated.wait_replicated() == 1  # what the master had, the replica has: nothing to lose
        promoted = replicated.failover()
        counter.rpush(counting_tools.RELEASE_KEY, "go")
        status = client.wait(ref, timeout=90)
        assert status.status == "completed" and status.reply == "ran", status
        assert counting_tools.calls(counter, "blocking_write") == 1
        # Not silent: the run's outcome says the store failed over under it; the turns around it say nothing.
        [done] = [e for e in client.events(ref.run_id) if e.type == "run.completed"]
        assert done.model_dump().get("store_failover") is True
        notes = [b.text for m in client.transcript(ref.run_id) if m.role == "notice" for b in m.content]
        assert FAILOVER_NOTICE in notes
        assert not any(e.model_dump().get("store_failover") for e in client.events("before"))

        started = time.monotonic()
        for n in range(2):
            result = client.wait(client.send_message("after", f"again {n}"), timeout=60)
            assert result.status == "completed" and result.reply == "reply"
        assert not any(e.model_dump().get("store_failover") for e in client.events("after"))
        after = time.monotonic() - started
        assert worker.alive
        print(f"sentinel: replica promoted {promoted:.2f}s after kill -9; two turns after it took {after:.2f}s")
    finally:
        stack.stop()
