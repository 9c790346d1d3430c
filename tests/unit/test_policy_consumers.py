"""The policy table against the real drivers: every driver in the Celery registry, every failure class,
and a behaviour check that each retryable verdict has a code path that acts on it."""

from __future__ import annotations

import json
import time

import fakeredis
import pytest

from agent.loop.failures import FailureClass
from agent.loop.policy import TABLE, Driver, missing_cells, policy_for
from agent.provider.scripted import ScriptedProvider, reply_fault, reply_text, reply_tool
from config.settings import Settings
from tasks.app import app
from tasks.execution import wiring
from tasks.execution.flow import Execution, Unit
from tasks.store import keys
from tasks.store.records import UnitRecord

FAULT_FOR = {
    FailureClass.INFRA_TRANSIENT: "drop",
    FailureClass.PROVIDER_STALL: "stall",
    FailureClass.PROVIDER_OVERLOADED: "overloaded",
    FailureClass.PROVIDER_SERVER_ERROR: "server_error",
    FailureClass.PROVIDER_RATE_LIMITED: "rate_limited",
    FailureClass.PROVIDER_AUTH: "auth",
}


def registered_drivers() -> set[Driver]:
    app.loader.import_default_modules()  # what a worker does at start: import the app's `include`
    return {task.driver for task in app.tasks.values() if getattr(task, "driver", None) is not None}


def test_every_driver_in_the_registry_has_a_policy_for_every_class():
    """Drivers come from the Celery app's registry and classes from the enum; a missing pair fails."""
    assert registered_drivers() == set(Driver)
    assert missing_cells(TABLE) == []
    pruned = {cell: p for cell, p in TABLE.items() if cell != (Driver.CODING_RUN, FailureClass.PROVIDER_STALL)}
    assert missing_cells(pruned) == [(Driver.CODING_RUN, FailureClass.PROVIDER_STALL)]


@pytest.fixture
def fake_store(monkeypatch):
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)
    monkeypatch.setattr(wiring, "redis_client", lambda url: client)
    return client


def _prepare(client, driver: Driver, tmp_path) -> Unit:
    if driver is Driver.CHAT_TURN:
        unit = Unit(driver, keys.owner("chat", "c1"), "t1")
        client.rpush(keys.queue(unit.owner_id), "t1")
        rec = UnitRecord(kind="turn", owner_id=unit.owner_id, unit_id="t1", text="hello", created_at=time.time())
    else:
        unit = Unit(driver, keys.owner("run", "r1"), "r1")
        rec = UnitRecord(kind="run", owner_id=unit.owner_id, unit_id="r1", text="goal", workspace=str(tmp_path))
    client.hset(unit.record_key, mapping=rec.to_hash())
    return unit


def _execute(monkeypatch, client, driver, tmp_path, fault, budget=1):
    settings = Settings(redis_url="redis://fake:6379/0", provider="scripted", retry_budget=budget, backoff_scale=0,
                        tools="tests.support.counting_tools:TOOLS")
    provider = ScriptedProvider([reply_tool("list_files" if driver is Driver.CODING_RUN else "lookup",
                                            {} if driver is Driver.CODING_RUN else {"key": "k"}),
                                 reply_fault(fault), reply_text("recovered")])
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: provider)
    monkeypatch.setenv("BATON_TEST_COUNTER_URL", "redis://fake:6379/0")
    monkeypatch.setattr("tests.support.counting_tools._redis", lambda: client)
    unit = _prepare(client, driver, tmp_path)
    return unit, Execution(settings, unit, hostname="w@test", task_id="task-1").run()


@pytest.mark.parametrize("driver", sorted(registered_drivers()))
@pytest.mark.parametrize("failure_class", list(FAULT_FOR))
def test_each_verdict_is_acted_on_by_each_driver(monkeypatch, fake_store, tmp_path, driver, failure_class):
    """A driver given a failure after a tool step does what its table cell says: an auto-resumable class is
    retried (the execution asks Celery for a retry, with the round stored); any other fails with the cell's
    retryable verdict and the class on the record."""
    unit, outcome = _execute(monkeypatch, fake_store, driver, tmp_path, FAULT_FOR[failure_class])
    policy = policy_for(driver, failure_class)
    record = {k.decode(): json.loads(v) for k, v in fake_store.hgetall(unit.record_key).items()}
    if policy.auto_resumes > 0:
        assert outcome.action == "auto_resume"
        assert record["status"] == "queued" and record["resume_pending"] is True
        assert fake_store.exists(keys.round_slot(unit.owner_id))
    else:
        assert outcome.action == "done"
        assert record["status"] == "failed"
        assert record["failure"]["class"] == failure_class
        assert record["failure"]["retryable"] is policy.retryable
