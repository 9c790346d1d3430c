"""The settled signal: every ending and every park writes it, and `Client.wait` wakes on it, not on each event."""

from __future__ import annotations

import threading
import time

import fakeredis
import pytest

from agent.loop.policy import Driver
from agent.messages import ToolUseBlock, stop_notice
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_text, reply_tool
from config.settings import Settings
from tasks.client import Client
from tasks.execution import wiring
from tasks.execution.flow import Execution, Unit
from tasks.store import keys, settled
from tasks.store.reads import parse_transcript
from tasks.store.records import Failure, TurnRef, UnitRecord
from tasks.store.withdrawal import withdraw

SETTINGS = Settings(redis_url="redis://fake:6379/0", provider="scripted", queue="q", lease_ttl=3,
                    tools="tests.support.counting_tools:TOOLS", backoff_scale=0)
OWNER = keys.owner("chat", "c1")
DEPLOY = ScriptedReply(content=(ToolUseBlock(id="toolu_deploy", name="deploy", input={"env": "prod"}),))


@pytest.fixture
def store(monkeypatch):
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    monkeypatch.setattr(wiring, "redis_client", lambda url: client)
    monkeypatch.setattr("tests.support.counting_tools._redis", lambda: client)
    return client


def _enqueue(store, turn_id: str = "t1", status: str = "queued") -> UnitRecord:
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id=turn_id, text="hello", status=status,
                     task_id=f"task-{turn_id}", created_at=time.time())
    store.hset(keys.record(OWNER, turn_id), mapping=rec.to_hash())
    store.rpush(keys.queue(OWNER), turn_id)
    return rec


def _signals(store) -> list[bytes]:
    return [fields[settled.FIELD.encode()] for _, fields in store.xrange(keys.settled(OWNER))]


def _run(monkeypatch, replies: list[ScriptedReply]):
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: ScriptedProvider(replies))
    return Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1").run()


def test_a_settle_signals(store, monkeypatch):
    _enqueue(store)
    assert _run(monkeypatch, [reply_text("hi")]).reason == "completed"
    assert _signals(store) == [b"t1"]


def test_a_park_for_approval_signals(store, monkeypatch):
    _enqueue(store)
    assert _run(monkeypatch, [DEPLOY]).reason == "waiting"
    assert store.hget(keys.record(OWNER, "t1"), "waiting_reason") == b'"approval"'
    assert _signals(store) == [b"t1"]


def test_a_withdrawal_signals(store):
    rec = _enqueue(store)
    failure = Failure.model_validate({"class": "infra_transient", "retryable": True, "message": "no broker"})
    assert withdraw(store, rec, rec.task_id, failure)
    assert _signals(store) == [b"t1"]


@pytest.fixture
def client(store):
    c = Client(Settings(redis_url="redis://127.0.0.1:1/0"))
    c.redis = store
    yield c
    c.close()


def test_wait_returns_on_the_signal_of_a_park_each_wake_one_round_trip_with_the_record(client, store, monkeypatch):
    """Events of the turn wake nothing; the park's signal returns at once, well inside the quiet second after which
    a waiter would read the record anyway. Each wake is one round trip: the record's read rides behind the
    blocking read of the signal (another turn's signal wakes it too, and costs no more)."""
    _enqueue(store, "t1", status="running")
    trips: list[list[str]] = []
    bare: list[str] = []
    real_pipeline, real_hgetall = client.redis.pipeline, client.redis.hgetall

    def pipeline(*args, **kwargs):
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        def execute(*a, **k):
            trips.append([str(c[0][0]) for c in pipe.command_stack])
            return real_execute(*a, **k)

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(client.redis, "pipeline", pipeline)
    monkeypatch.setattr(client.redis, "hgetall", lambda key: bare.append(key) or real_hgetall(key))

    def worker() -> None:
        time.sleep(0.1)
        for _ in range(5):
            store.xadd(keys.events(OWNER), {"e": '{"type":"tool.called"}'})
        store.xadd(keys.settled(OWNER), {settled.FIELD: "t0"})  # a turn ahead of it
        time.sleep(0.05)
        store.hset(keys.record(OWNER, "t1"), mapping={"status": '"waiting"', "waiting_reason": '"approval"'})
        store.xadd(keys.settled(OWNER), {settled.FIELD: "t1"})

    thread = threading.Thread(target=worker)
    started = time.monotonic()
    thread.start()
    result = client.wait(TurnRef(chat_id="c1", turn_id="t1", task_id="task-t1"), timeout=10)
    elapsed = time.monotonic() - started
    thread.join()
    assert (result.status, result.waiting_reason) == ("waiting", "approval")
    assert elapsed < 0.8, elapsed
    assert bare == []  # no read of the record on its own
    assert trips[0] == ["XREVRANGE", "HGETALL"]  # the signal's tail and the record, before the first wait
    assert 2 <= len(trips) - 1 <= 3 and all(t == ["XREAD", "HGETALL"] for t in trips[1:]), trips


def test_a_stop_asked_while_a_drain_is_settling_ends_the_unit_stopped_not_requeued(store, monkeypatch):
    """A SIGTERM's drain reached the unit first (its watcher's poll read the drain flag before the stop key was
    written), and the user's stop came before the unit settled: it ends `stopped` here with the stop's notice alone,
    not requeued with a deploy notice for the next worker to stop it (CI saw both notices in one transcript). Shown
    red without `_stop_asked`: the outcome was `requeue`."""
    _enqueue(store)
    execution = Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1")

    def drained_then_stopped(_request, _attempt):
        execution.cancel.cancel("drain")
        store.set(keys.stop(OWNER), "t1")
        return reply_tool("record_note", {"note": "n1"})

    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: ScriptedProvider(drained_then_stopped))
    outcome = execution.run()
    assert (outcome.action, outcome.reason) == ("done", "stopped"), outcome
    transcript = parse_transcript(store.lrange(keys.transcript(OWNER), 0, -1))
    notices = [m.text for m in transcript if m.role == "notice"]
    assert notices == [stop_notice(None)]
    assert store.hget(keys.record(OWNER, "t1"), "interruptions") in (None, b"0")
