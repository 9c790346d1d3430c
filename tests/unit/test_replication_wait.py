"""An execution behind Sentinel whose write tool's entry no replica confirms: it goes back to the queue with its
journal, says why (infra_transient, not unknown), and the next execution runs the tool once; past the limit it
fails as infra_transient, retryable. With no replica online the tool runs and the terminal event lists it.

fakeredis has neither INFO nor WAIT: the master's replies and WAIT's answer are simulated; the real ones are
exercised by tests/integration/test_sentinel.py.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import fakeredis
import pytest

from agent.loop.policy import MAX_REPLICATION_WAITS, Driver
from agent.provider.scripted import ScriptedProvider, reply_text, reply_tool
from config.settings import Settings
from tasks.execution import flow, wiring
from tasks.execution.flow import Execution, Unit
from tasks.store import journal as journal_module
from tasks.store import keys
from tasks.store.fenced import Batch, Fence, ReplicationUnconfirmed
from tasks.store.records import UnitRecord
from tests.support import counting_tools


class Store:
    """A fakeredis store posing as a Sentinel master: `online` replicas, and WAIT answering `acks` in turn."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        self.online = 1
        self.acks: list[int] = []
        lines = lambda: {f"slave{n}": {"state": "online"} for n in range(self.online)}  # noqa: E731
        info = lambda section="": {"role": "master", "master_replid": "abc", **lines()}  # noqa: E731
        self.client.info = info  # type: ignore[method-assign]
        real_take = flow.take

        def take(*args: Any, replication: bool = False, **kwargs: Any) -> Any:
            # The take's script reads INFO replication where the store can fail over: here, the simulated reply.
            taken = real_take(*args, **kwargs)
            return dataclasses.replace(taken, replication=info() if replication else None)

        monkeypatch.setattr(flow, "take", take)
        commit = Fence.commit

        def waiting_commit(
            fence: Fence, batch: Batch, *, replicas: int = 0, timeout_ms: int = 0, via: Any = None,
            unless_failed_over: str | None = None,
        ) -> list[Any]:
            replies = commit(fence, batch)  # the settle's guard asks INFO, which fakeredis lacks: never failed over
            if replicas and self.acks.pop(0) < replicas:
                raise ReplicationUnconfirmed(f"0 of {replicas} replicas confirmed the write within {timeout_ms} ms")
            return replies

        monkeypatch.setattr(Fence, "commit", waiting_commit)
        # As behind Sentinel: the store itself is the master a write is confirmed through.
        monkeypatch.setattr(flow, "master_of", lambda client, key: client)
        monkeypatch.setattr(journal_module, "master_of", lambda client, key: client)
        monkeypatch.setattr(journal_module.REPLICAS, "_ttl", 0.0)  # read the (simulated) master every time
        monkeypatch.setattr(wiring, "redis_client", lambda url: self.client)
        monkeypatch.setattr(counting_tools, "_redis", lambda: self.client)

    def events(self, owner_id: str) -> list[dict[str, Any]]:
        return [json.loads(fields[b"e"]) for _, fields in self.client.xrange(keys.events(owner_id))]


@pytest.fixture
def store(monkeypatch) -> Store:
    return Store(monkeypatch)


def _unit(store: Store, driver: Driver, tmp_path) -> Unit:
    if driver is Driver.CHAT_TURN:
        unit = Unit(driver, keys.owner("chat", "c1"), "t1")
        store.client.rpush(keys.queue(unit.owner_id), "t1")
        rec = UnitRecord(kind="turn", owner_id=unit.owner_id, unit_id="t1", text="note it", created_at=time.time())
    else:
        unit = Unit(driver, keys.owner("run", "r1"), "r1")
        rec = UnitRecord(kind="run", owner_id=unit.owner_id, unit_id="r1", text="note it", workspace=str(tmp_path))
    store.client.hset(unit.record_key, mapping=rec.to_hash())
    return unit


def _executions(monkeypatch, unit: Unit):
    """Executions of `unit` as a worker would run them, one per call, sharing one scripted model."""
    settings = Settings(
        redis_url="redis://fake:6379/0",
        provider="scripted",
        backoff_scale=0,
        tools="tests.support.counting_tools:TOOLS",
    )
    provider = ScriptedProvider([reply_tool("record_note", {"note": "n"}, call_id="toolu_1"), reply_text("ok")])
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: provider)
    return lambda: Execution(settings, unit, hostname="w@test", task_id="task-1").run()


def _record(store: Store, unit: Unit) -> UnitRecord:
    rec = UnitRecord.from_hash(store.client.hgetall(unit.record_key))
    assert rec is not None
    return rec


@pytest.mark.parametrize("driver", list(Driver))
def test_an_unconfirmed_entry_requeues_the_unit_and_the_next_execution_runs_the_tool_once(
    monkeypatch, store, tmp_path, driver
):
    unit = _unit(store, driver, tmp_path)
    run = _executions(monkeypatch, unit)
    store.acks = [0, 1]
    waited = run()
    assert waited.action == "auto_resume" and waited.reason.startswith("infra_transient")
    assert counting_tools.calls(store.client, "record_note") == 0
    rec = _record(store, unit)
    assert rec.status == "queued" and rec.failure is None and rec.generation == 0
    assert not store.client.exists(keys.lease(unit.owner_id))
    [wait] = [e for e in store.events(unit.owner_id) if e.get("replication_wait")]
    assert wait["type"] == ("turn.retry" if driver is Driver.CHAT_TURN else "run.step")
    assert (wait["class"], wait["discarded"], wait["max_replication_waits"]) == (
        "infra_transient",
        False,
        MAX_REPLICATION_WAITS,
    )
    assert "the write tool 'record_note' was not run" in wait["reason"]

    done = run()
    assert done.action == "done" and _record(store, unit).status == "completed"
    assert counting_tools.calls(store.client, "record_note") == 1
    terminal = store.events(unit.owner_id)[-1]
    assert terminal["type"].endswith(".completed") and "unreplicated" not in terminal


def test_past_the_limit_the_unit_fails_as_infra_transient_retryable(monkeypatch, store, tmp_path):
    unit = _unit(store, Driver.CHAT_TURN, tmp_path)
    run = _executions(monkeypatch, unit)
    store.acks = [0] * (MAX_REPLICATION_WAITS + 1)
    outcomes = [run().action for _ in range(MAX_REPLICATION_WAITS + 1)]
    assert outcomes == ["auto_resume"] * MAX_REPLICATION_WAITS + ["done"]
    rec = _record(store, unit)
    assert rec.status == "failed" and rec.failure is not None
    assert (rec.failure.failure_class, rec.failure.retryable) == ("infra_transient", True)
    assert counting_tools.calls(store.client, "record_note") == 0


def test_with_no_replica_online_the_tool_runs_once_and_the_terminal_event_says_unreplicated(
    monkeypatch, store, tmp_path
):
    unit = _unit(store, Driver.CHAT_TURN, tmp_path)
    store.online = 0  # a promoted replica, alone
    assert _executions(monkeypatch, unit)().action == "done"
    assert counting_tools.calls(store.client, "record_note") == 1
    events = store.events(unit.owner_id)
    [result] = [e for e in events if e["type"] == "tool.result"]
    assert result["unreplicated"] is True
    assert events[-1]["type"] == "turn.completed" and events[-1]["unreplicated"] == ["toolu_1"]
