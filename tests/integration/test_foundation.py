"""Foundation, end to end: real redis-server, real celery workers, the real SDK against the fake API."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from tests.conftest import PROVIDERS
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import POOLS, REPO

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cli_send_wait_runs_a_tool_round_and_feeds_back_structured_blocks(stack, provider):
    """`baton send --wait --json` completes a turn with a tool round; the tool ran once; the second request
    carried the tool_use and its tool_result as blocks; the turn's events read back in order."""
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "a"}), text("The answer is A.")]))
    stack.worker()
    out = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "send", "c1", "what is a?", "--wait", "--json", "--timeout", "60"],
        cwd=REPO,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {
        "chat_id", "turn_id", "task_id", "status", "waiting_reason", "reply", "resumed", "failure", "usage", "agent",
        "agent_version", "model",
    }
    assert (result["agent"], result["model"]) == ("default", "claude-test")
    assert result["status"] == "completed" and result["reply"] == "The answer is A."
    assert result["usage"]["attempts"] == 2 and result["usage"]["discarded_attempts"] == 0

    r = redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)
    assert counting_tools.calls(r, "lookup") == 1
    assert stack.fake_api.request_count == 2
    second = stack.fake_api.requests[1]["messages"]
    assistant, results = second[-2], second[-1]
    assert assistant["role"] == "assistant" and assistant["content"][0]["type"] == "tool_use"
    assert results["role"] == "user" and results["content"][0]["type"] == "tool_result"
    assert results["content"][0]["tool_use_id"] == assistant["content"][0]["id"]
    assert "value-of-a" in results["content"][0]["content"]

    events = stack.client().events("c1")
    types = [e.type for e in events]
    assert types == ["turn.queued", "turn.started", "tool.called", "tool.result", "turn.completed"]
    assert [e.id for e in events] == sorted((e.id for e in events), key=lambda i: tuple(map(int, i.split("-"))))


def test_two_turns_of_one_chat_run_one_after_the_other(stack):
    """A second turn sent while the first is mid-tool waits; it starts only after the first completed."""
    stack.fake_api.set_handler(
        Script([tool_call("blocking_write", {"note": "n1"}), text("first done"), text("second done")])
    )
    stack.worker()
    client = stack.client()
    r = redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)
    t1 = client.send_message("c2", "first")
    t2 = client.send_message("c2", "second")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # turn 1 is inside its tool
    assert client.turn("c2", t2.turn_id).status == "queued"
    assert stack.fake_api.request_count == 1
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert client.wait(t1, timeout=30).status == "completed"
    result2 = client.wait(t2, timeout=30)
    assert result2.status == "completed" and result2.reply == "second done"
    order = [(e.type, e.turn_id) for e in client.events("c2") if e.type in ("turn.started", "turn.completed")]
    assert order == [
        ("turn.started", t1.turn_id),
        ("turn.completed", t1.turn_id),
        ("turn.started", t2.turn_id),
        ("turn.completed", t2.turn_id),
    ]


@pytest.mark.parametrize("pool", POOLS)
def test_turns_reuse_the_provider_connection_of_their_worker_process(stack, pool):
    """A worker keeps one SDK client (and its connection pool) per process: against an API that keeps
    connections alive, turns after the first open no connection of their own (in production each would be a
    TCP and TLS handshake with the provider before the first token)."""
    stack.fake_api.keep_alive = True
    stack.fake_api.set_handler(lambda body, index: tool_call("lookup", {"key": "a"}) if index % 2 == 0 else text("A."))
    stack.worker(concurrency=1, pool=pool)
    client = stack.client()
    assert client.wait(client.send_message("warm", "hi"), timeout=60).status == "completed"
    opened = stack.fake_api.connections
    for i in range(6):
        assert client.wait(client.send_message(f"c{i}", "what is a?"), timeout=60).status == "completed"
    assert len(stack.fake_api.requests) == 14  # two requests a turn: the tool round, then the answer
    assert stack.fake_api.connections == opened


def test_a_turn_in_any_script_reaches_the_provider_and_the_transcript_as_written(stack):
    """Non-ASCII text (kept as UTF-8 in the record, put into the user's message by the take script) reaches the
    provider unchanged, and the answer comes back unchanged in the result, the record and the transcript."""
    from agent.messages import load_message

    question, answer = "¿Qué es «a»? 日本語で答えて 🙂 \u2028 tab\there", "Ответ: «A» — 答え 🙂"
    stack.fake_api.set_handler(Script([text(answer)]))
    stack.worker()
    client = stack.client()
    result = client.wait(client.send_message("c-intl", question), timeout=60)
    assert result.status == "completed" and result.reply == answer
    [request] = stack.fake_api.requests
    assert [b["text"] for b in request["messages"][-1]["content"]] == [question]
    r = redis.Redis.from_url(stack.redis_server.url)
    user, assistant = (load_message(raw) for raw in r.lrange("baton:{chat:c-intl}:transcript", 0, -1))
    assert user is not None and assistant is not None
    assert [b.text for b in user.content] == [question] and [b.text for b in assistant.content] == [answer]


@pytest.mark.parametrize("case", ["runs", "not the head"])
def test_the_take_reads_the_masters_replication_history_in_its_own_script(redis_server, case):
    """Where the store can fail over (Sentinel, a cluster), the take's script reads INFO replication before it
    writes anything: the history the settle compares and the replicas a write tool waits for come with the take,
    whether or not the unit may run (fakeredis has no INFO: a real redis-server). Not asked, nothing is read."""
    from tasks.store import keys
    from tasks.store.lease import Lease
    from tasks.store.records import UnitRecord
    from tasks.store.take import take

    client = redis.Redis.from_url(redis_server.url)
    owner = keys.owner("chat", f"take-{case}")
    rec = UnitRecord(kind="turn", owner_id=owner, unit_id="t1", text="hi", task_id="task-t1")
    client.hset(keys.record(owner, "t1"), mapping=rec.to_hash())
    client.rpush(keys.queue(owner), *(["t0"] if case == "not the head" else []), "t1")
    lease = Lease(client, keys.lease(owner), "t1|w1|tok", ttl=30)
    taken = take(client, lease, owner_id=owner, unit_id="t1", hostname="w1", check_head=True, replication=True)
    assert taken.acquired is (True if case == "runs" else None)
    assert taken.replication is not None
    assert taken.replication["role"] == "master"
    assert taken.replication["master_replid"] == client.info("replication")["master_replid"]
    client.delete(keys.lease(owner))
    again = take(client, lease, owner_id=owner, unit_id="t1", hostname="w1", check_head=True)
    assert again.replication is None


def test_a_fenced_write_guarded_by_a_replication_id_writes_nothing_on_another_master(redis_server):
    """The settle's write carries the replication id the take read: a master with another one (a failover came in
    between) gets nothing written and says so (`FailedOver`), and what the write took from ahead of it (a held
    batch, buffered live text) is kept for the next write; with the master's own id the write goes through."""
    from tasks.store.fenced import Batch, FailedOver, Fence

    client = redis.Redis.from_url(redis_server.url)
    client.set("lease", "tok")
    fence = Fence(client, "lease", "tok")
    own = client.info("replication")["master_replid"]
    fence.hold(Batch().add("RPUSH", "ahead", "held"))
    with pytest.raises(FailedOver):
        fence.commit(Batch().add("SET", "settled", "1"), unless_failed_over="0" * 40)
    assert client.exists("ahead", "settled") == 0
    assert fence.commit(Batch().add("SET", "settled", "1").read("GET", "settled"), unless_failed_over=own) == [b"1"]
    assert client.lrange("ahead", 0, -1) == [b"held"]
