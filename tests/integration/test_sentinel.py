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


def _await_event(client, ident: str, wanted, timeout: float = 60):
    """The first event of `ident` for which `wanted(event)` holds, read as they arrive (no polling sleeps); an
    ending of the unit before it fails at once."""
    deadline, after = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        for event in client.follow(ident, after, block_ms=500):
            after = event.id
            if wanted(event):
                return event
            if event.type.endswith((".completed", ".failed", ".stopped")):
                raise AssertionError(f"{ident} ended first: {event.model_dump()}")
    raise AssertionError(f"no such event of {ident} within {timeout}s")


def test_a_replica_that_stops_acknowledging_makes_a_write_wait_and_resume_not_fail(
    replicated: ReplicatedRedis, redis_server: RedisServer, fake_api, tmp_path: Path
):
    """Behind Sentinel a write tool runs only once a replica has its write-ahead entry (WAIT). With the replica
    SIGSTOPped past WAIT's timeout (2 s) the turn does not fail: its tool has not run, and it goes back to the
    queue saying why (`turn.retry`, infra_transient, with the policy's backoff); once the replica answers again
    (SIGCONT) it resumes and completes, the write run exactly once."""
    stack = _sentinel_stack(replicated, redis_server, fake_api, tmp_path)
    counter = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:
        from tests.support.fake_anthropic import text, tool_call

        fake_api.set_handler(
            lambda body, index: tool_call("record_note", {"note": "n"}) if len(body["messages"]) == 1 else text("ok")
        )
        stack.worker("a")
        client = stack.client()
        started = time.monotonic()
        replicated.pause_replica()
        try:
            ref = client.send_message("lagging", "note it")
            waiting = _await_event(client, "lagging", lambda e: e.model_dump().get("replication_wait") is not None)
            waited = time.monotonic() - started
            assert waiting.type == "turn.retry" and waiting.model_dump()["class"] == "infra_transient"
            assert "record_note" in waiting.model_dump()["reason"]
            assert counting_tools.calls(counter, "record_note") == 0
            assert client.turn("lagging", ref.turn_id).status in ("queued", "running")
        finally:
            replicated.resume_replica()
        result = client.wait(ref, timeout=60)
        assert result.status == "completed" and result.reply == "ok", result
        assert counting_tools.calls(counter, "record_note") == 1
        types = [e.type for e in client.events("lagging")]
        assert "turn.failed" not in types and types[-1] == "turn.completed"
        print(
            f"sentinel: a write waited {waited:.2f}s for a stopped replica, completed {time.monotonic() - started:.2f}s"
        )
    finally:
        stack.stop()


def test_turns_and_a_run_go_on_after_the_master_is_killed_and_the_replica_promoted(
    replicated: ReplicatedRedis, redis_server: RedisServer, fake_api, tmp_path: Path
):
    """Turns complete before the failover; a run whose write tool is mid-call when the master is killed (its
    writes replicated first: WAIT 1) completes afterwards with the write run once, its outcome stating the
    failover; turns sent after the promotion complete on the same, never restarted, worker, and a write tool
    after it (no replica left) runs once in the chat from before, its outcome saying it ran unreplicated."""
    stack = _sentinel_stack(replicated, redis_server, fake_api, tmp_path)
    counter = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:

        def answer(body: dict, index: int):
            from tests.support.fake_anthropic import text, tool_call

            first, last = str(body["messages"][0]), str(body["messages"][-1])
            if "across the failover" in first:
                return tool_call("blocking_write", {"note": "once"}) if len(body["messages"]) == 1 else text("ran")
            if "note after the failover" in last:
                return tool_call("record_note", {"note": "after"})
            if "tool_result" in last:
                return text("noted")
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

        # A write tool after the promotion: the new master has no replica, so nothing a failover could promote
        # over its entry. In the chat from before the failover (its history intact), the turn completes, the write
        # runs once, and the outcome says it ran unreplicated; nothing confirmed before the failover says so.
        noted = client.wait(client.send_message("before", "note after the failover"), timeout=60)
        assert noted.status == "completed" and noted.reply == "noted", noted
        assert counting_tools.calls(counter, "record_note") == 1
        asked = next(b for b in fake_api.requests if "note after the failover" in str(b["messages"]))
        assert "hello 0" in str(asked["messages"]) and "hello 1" in str(asked["messages"])
        users = [b.text for m in client.transcript("before") if m.role == "user" for b in m.content if b.type == "text"]
        assert users == ["hello 0", "hello 1", "note after the failover"]
        turn_events = [
            e.model_dump() for e in client.events("before") if e.model_dump().get("turn_id") == noted.turn_id
        ]
        [result] = [e for e in turn_events if e["type"] == "tool.result"]
        assert result["unreplicated"] is True
        assert turn_events[-1]["type"] == "turn.completed"
        assert turn_events[-1]["unreplicated"] == [result["tool_use_id"]]
        assert not any(e.model_dump().get("unreplicated") for e in client.events(ref.run_id))
        assert worker.alive
        print(f"sentinel: replica promoted {promoted:.2f}s after kill -9; two turns after it took {after:.2f}s")
    finally:
        stack.stop()
