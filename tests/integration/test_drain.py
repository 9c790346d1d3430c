"""Deploy drain and crash recovery with real workers: SIGTERM, SIGKILL, and a Redis restart (AOF)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from agent.messages import DEPLOY_NOTICE
from tests.conftest import Stack
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import NEEDS_GEVENT, RedisServer, wait_until
from tests.support.processes import POOLS as PROCESS_POOLS

pytestmark = pytest.mark.integration

# The pools a drain and a crash must work on: prefork (a process per unit, the children never see the shutdown)
# and threads (every unit in the worker's one process, beaten by one poller).
POOLS = pytest.mark.parametrize("pool", PROCESS_POOLS)
# The same, plus the OpenAI edge once on prefork (the default pool): a drain must cut its stream as it cuts
# Anthropic's, and the request the other worker sends must be the one that was in flight.
POOLS_AND_OPENAI = pytest.mark.parametrize(
    ("pool", "provider"),
    [*(pytest.param(*p.values, "anthropic", marks=p.marks) if hasattr(p, "values") else (p, "anthropic")
       for p in PROCESS_POOLS), ("prefork", "openai")],
)
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))


def _events(client, ident):
    return [e for e in client.events(ident)]


@POOLS_AND_OPENAI
def test_rolling_deploy_moves_a_run_to_another_worker(stack, tmp_path: Path, pool: str, provider: str):
    """SIGTERM on the worker running a coding run: it exits within 5 s, the run finishes on the other worker
    with interruptions == 1, events and transcript say why, each write tool ran once, and the provider saw
    exactly one repeated request (the stream that was in flight)."""
    stack.fake_api.set_handler(
        Script(
            [tool_call("record_note", {"note": "a"}), tool_call("record_note", {"note": "b"}), STALL, text("all done")]
        )
    )
    worker_a = stack.worker("a", pool=pool)
    client = stack.client()
    ref = client.start_run("write two notes", workspace=tmp_path)
    assert stack.fake_api.wait_for_requests(3, timeout=30)  # A is mid-stream on the third step
    worker_b = stack.worker("b")
    started = time.monotonic()
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    drain_seconds = time.monotonic() - started
    print(f"drain on {pool}: worker exited {drain_seconds:.2f}s after SIGTERM")
    assert drain_seconds <= 5.0, f"worker took {drain_seconds:.2f}s to drain"

    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "all done"
    assert status.interruptions == 1 and status.waiting_reason is None
    r = redis.Redis.from_url(stack.redis_server.url)
    assert counting_tools.calls(r, "record_note") == 2
    assert stack.fake_api.request_count == 4
    assert stack.fake_api.requests[3]["messages"] == stack.fake_api.requests[2]["messages"]

    events = _events(client, ref.run_id)
    interrupted = [e for e in events if e.type == "run.interrupted"]
    assert len(interrupted) == 1
    assert interrupted[0].model_extra["attempt"] == 1 and interrupted[0].model_extra["max_attempts"] == 3
    assert interrupted[0].model_extra["cause"] == "platform_deploy"
    types = [e.type for e in events]
    assert types.index("run.interrupted") < types.index("run.resumed") < types.index("run.completed")
    notices = [m.text for m in client.transcript(ref.run_id) if m.role == "notice"]
    assert DEPLOY_NOTICE.format(attempt=1, max_attempts=3) in notices
    assert "PlatformInterrupt" in worker_a.log() or "Retry in" in worker_a.log()
    worker_b.stop()


@pytest.mark.parametrize("pool", ["threads", pytest.param("gevent", marks=NEEDS_GEVENT)])
def test_an_idle_worker_on_a_one_process_pool_exits_promptly_on_sigterm(scripted_stack, pool: str):
    """A deploy waits on every worker's exit. On gevent, Celery's blocking consumer loop saw the warm shutdown
    only after its 2 s poll and one more after it: an idle worker took 4.3 s. Its drain now stops the loop at once,
    once the pidbox listens: it is stopped here right after it is ready, before the pidbox's greenlet subscribed."""
    worker = scripted_stack.worker("idle", pool=pool)
    started = time.monotonic()
    worker.terminate()
    assert worker.wait_exit(timeout=15) == 0
    exited = time.monotonic() - started
    assert exited <= 3.0, f"an idle {pool} worker took {exited:.2f}s to exit:\n{worker.log()[-2000:]}"


@POOLS
def test_a_chat_turn_drained_mid_stream_completes_on_the_other_worker_with_one_reply(stack, pool: str):
    """A chat turn whose worker drains mid-stream is requeued and finished by another worker; one reply."""
    stack.fake_api.set_handler(Script([STALL, text("the one reply")]))
    worker_a = stack.worker("a", pool=pool)
    client = stack.client()
    ref = client.send_message("drain-chat", "hello")
    assert stack.fake_api.wait_for_requests(1, timeout=30)
    stack.worker("b")
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    result = client.wait(ref, timeout=60)
    assert result.status == "completed" and result.reply == "the one reply"
    replies = [m for m in client.transcript("drain-chat") if m.role == "assistant"]
    assert [m.text for m in replies] == ["the one reply"]
    assert [e.type for e in client.events("drain-chat")].count("turn.completed") == 1


@pytest.fixture
def aof_stack(tmp_path: Path, fake_api):
    server = RedisServer(tmp_path / "aof", aof=True).start()
    s = Stack(server, fake_api, tmp_path)
    yield s
    s.stop()
    server.stop()


def _aof_contains(directory: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in directory.rglob("*.aof*") if p.is_file())


def test_deploy_storm_fails_the_run_as_infra_transient_and_the_counter_survives_a_redis_restart(aof_stack, tmp_path):
    """Interrupt one run BATON_MAX_INTERRUPTIONS + 1 times, with a kill -9 and restart of Redis (AOF) in
    between: the durable counter survives, and past the limit the run fails as infra_transient, saying why."""
    stack = aof_stack
    stack.fake_api.set_handler(lambda body, index: STALL)
    env = {"BATON_MAX_INTERRUPTIONS": "2"}
    client = stack.client(**env)
    ref = client.start_run("never finishes", workspace=tmp_path)
    for attempt in range(1, 4):
        worker = stack.worker(f"storm{attempt}", **env)
        assert stack.fake_api.wait_for_requests(attempt, timeout=30)
        worker.terminate()
        worker.wait_exit(timeout=15)
        if attempt == 1:
            status = client.run_status(ref.run_id)
            assert status.interruptions == 1 and status.waiting_reason == "platform_interrupt"
            # Wait for the everysec fsync to carry the counter to disk, then crash and restart Redis.
            wait_until(lambda: _aof_contains(stack.redis_server.dir, b"platform_interrupt"), 10, what="AOF fsync")
            client.close()
            stack.redis_server.restart(kill=True)
            client = stack.client(**env)
            assert client.run_status(ref.run_id).interruptions == 1
    status = client.run_status(ref.run_id)
    assert status.status == "failed" and status.interruptions == 3
    assert status.failure is not None and status.failure["class"] == "infra_transient"
    assert "platform deploy" in status.failure["message"]
    failed = [e for e in client.events(ref.run_id) if e.type == "run.failed"]
    assert len(failed) == 1 and failed[0].model_extra["class"] == "infra_transient"


def test_a_run_failed_by_a_deploy_storm_is_retried_from_what_it_finished(stack, tmp_path):
    """Past BATON_MAX_INTERRUPTIONS the run fails, but keeps its finished rounds in the expiring slot: a retry
    within the TTL goes on from them, so the write tool that already ran is not run again."""
    env = {"BATON_MAX_INTERRUPTIONS": "0"}
    stack.fake_api.set_handler(Script([tool_call("record_note", {"note": "once"}), STALL, text("finished")]))
    worker = stack.worker("a", **env)
    client = stack.client(**env)
    ref = client.start_run("write once", workspace=tmp_path)
    assert stack.fake_api.wait_for_requests(2, timeout=30)
    worker.terminate()
    worker.wait_exit(timeout=15)
    failed = client.run_status(ref.run_id)
    assert failed.status == "failed" and failed.failure["class"] == "infra_transient"
    assert [e.model_extra["resumable_round"] for e in client.events(ref.run_id) if e.type == "run.failed"] == [True]
    stack.worker("b", **env)
    client.retry(ref.run_id)
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "finished"
    assert counting_tools.calls(redis.Redis.from_url(stack.redis_server.url), "record_note") == 1


@POOLS
def test_sigkill_of_the_holder_is_recovered_by_another_worker_within_one_and_a_half_lease_ttls(stack, tmp_path, pool):
    """SIGKILL the whole worker holding a run: its lease expires and another worker's sweep requeues it;
    the run resumes within 1.5 x BATON_LEASE_TTL and never has two live executions."""
    ttl = 3.0
    env = {"BATON_LEASE_TTL": str(ttl)}
    stack.fake_api.set_handler(Script([tool_call("record_note", {"note": "x"}), STALL, text("recovered")]))
    worker_a = stack.worker("a", pool=pool, **env)
    client = stack.client(**env)
    ref = client.start_run("survive a crash", workspace=tmp_path)
    assert stack.fake_api.wait_for_requests(2, timeout=30)
    stack.worker("b", **env)
    killed = time.monotonic()
    worker_a.kill9()
    assert stack.fake_api.wait_for_requests(3, timeout=30)
    recovered = time.monotonic() - killed
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "recovered"
    assert recovered <= 1.5 * ttl, f"resumed {recovered:.2f}s after SIGKILL (lease TTL {ttl}s)"
    r = redis.Redis.from_url(stack.redis_server.url)
    assert counting_tools.calls(r, "record_note") == 1
    lost = [e for e in client.events(ref.run_id) if e.type == "run.interrupted"]
    assert [e.model_extra["cause"] for e in lost] == ["worker_lost"]


def test_a_sigterm_to_the_whole_process_group_drains_a_write_in_flight_instead_of_losing_it(stack, tmp_path: Path):
    """systemd's default KillMode, `pkill celery` and an init that signals the group send SIGTERM to the prefork
    pool children too, where Celery's default ended them at once: the write in flight was a lost worker's, answered
    `[Interrupted before result was recorded]` and never run again. Now the child drains: the started write gets
    its grace and its result is recorded, the run moves on as a platform deploy, and every write ran once."""
    stack.fake_api.set_handler(
        Script([tool_call("blocking_write", {"note": "a"}), STALL, text("done")])  # the drain cuts the stall
    )
    worker_a = stack.worker("a", pool="prefork", concurrency=1)
    client = stack.client()
    ref = client.start_run("write two notes", workspace=tmp_path)
    r = redis.Redis.from_url(stack.redis_server.url)
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # the write has started in the child
    assert worker_a.proc is not None
    os.killpg(worker_a.proc.pid, signal.SIGTERM)
    r.rpush(counting_tools.RELEASE_KEY, "go")  # the write finishes inside its drain grace
    assert worker_a.wait_exit(timeout=15) == 0
    stack.worker("b")
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "done"
    assert counting_tools.calls(r, "blocking_write") == 1
    assert "WorkerLostError" not in worker_a.log()
    results = [b for m in client.transcript(ref.run_id) for b in m.tool_results]
    assert [b.content for b in results if b.synthesized] == []
    causes = [e.model_extra["cause"] for e in client.events(ref.run_id) if e.type == "run.interrupted"]
    assert causes == ["platform_deploy"]
