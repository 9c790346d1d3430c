"""The settled signal: every ending and every park writes it, and `Client.wait` wakes on it, not on each event."""

from __future__ import annotations

import threading
import time

import fakeredis
import pytest

from agent.loop.policy import Driver
from agent.messages import ToolUseBlock
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_text
from config.settings import Settings
from tasks.client import Client
from tasks.execution import wiring
from tasks.execution.flow import Execution, Unit
from tasks.store import keys, settled
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


def test_wait_returns_on_the_signal_of_a_park_and_reads_the_record_only_then(client, store, monkeypatch):
    """Events of the turn (and another turn's signal) wake nothing; the park's signal returns at once, well
    inside the quiet second after which a waiter would read the record anyway."""
    _enqueue(store, "t1", status="running")
    reads: list[str] = []
    real = client.redis.hgetall
    monkeypatch.setattr(client.redis, "hgetall", lambda key: reads.append(key) or real(key))

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
    assert len(reads) == 1  # the record, after its own signal (the first read is in wait's pipeline)
