"""A drain at every point of a run's step cycle: every write runs exactly once, and the run completes.

One process, a real redis-server, real executions (`tasks.execution.flow.Execution`) with the Redis journal
and fenced writes; the drain is the cancel token set to "drain" from a hook at a chosen point of the cycle
(as the watcher sets it when it reads the worker's drain flag), so the timing is exact rather than a sleep's.
Each drained execution requeues; the next one resumes the unit as another worker would. Each run is drained
at every one of its steps at one point, so a window anywhere in the cycle is hit many times.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from agent.loop.policy import Driver
from agent.messages import INTERRUPTED_RESULT
from agent.provider.base import Answer, ProviderRequest
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_text, reply_tool
from agent.tools import by_name, tool
from agent.tools.threads import ToolThreads
from config.settings import Settings
from tasks.execution import flow, wiring
from tasks.execution.flow import Execution, Unit
from tasks.store import journal as journal_module
from tasks.store import keys
from tasks.store.records import UnitRecord
from tasks.store.replies import hash_mapping
from tests.support.processes import RedisServer

pytestmark = pytest.mark.integration

STEPS = 12  # one note per step; each run is drained once at each of them
LATE_GRACE = 0.05  # the drain grace of the "thread_late" case, whose tool thread starts three graces late


class Drains:
    """Sets the current execution's cancel token to "drain" when the armed point is reached, once per step."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.cancel: Callable[[], None] | None = None
        self.done: set[int] = set()  # the steps already drained at this point
        self.step = -1  # the step whose model answer was last produced (the call being handled belongs to it)
        self.fired = 0

    def at(self, point: str, step: int | None = None) -> None:
        step = self.step if step is None else step
        if point == self.point and step not in self.done and self.cancel is not None:
            self.done.add(step)
            self.fired += 1
            self.cancel()


POINTS = [
    "stream_end",  # the model's stream completed, before its journal write
    "model_write",  # during the model step's journal write (set before the fenced write goes out)
    "model_written",  # the model step is journaled; the round has not started
    "committing_written",  # the write tool's write-ahead entry is journaled; the tool thread has not started
    "thread_start",  # the tool thread is being started
    "thread_late",  # the tool thread is being started, and does not get to run before the drain's grace ends
    "tool_running",  # inside the tool, while it runs (a started call)
    "result_write",  # during the result's fenced write
    "result_written",  # the result is journaled; the loop has not looked at the token yet
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[redis.Redis]:
    server = RedisServer(tmp_path / "redis").start()
    yield redis.Redis.from_url(server.url)
    server.stop()


def _harness(monkeypatch: pytest.MonkeyPatch, store: redis.Redis, drains: Drains, notes: list[int]) -> Settings:
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{store.connection_pool.connection_kwargs['port']}/0",
        provider="scripted",
        queue="drain-windows",
        max_interruptions=100,
        backoff_scale=0,
        lease_ttl=15,
        drain_grace=LATE_GRACE if drains.point == "thread_late" else 2.0,
    )
    lock = threading.Lock()

    @tool(effect="write")
    def note(n: int) -> str:
        """Write note n (counted)."""
        drains.at("tool_running")
        with lock:
            notes.append(n)
        return f"noted {n}"

    def script(request: ProviderRequest, _index: int) -> ScriptedReply:
        answered = sum(1 for m in request.messages if m["role"] == "assistant")
        return reply_tool("note", {"n": answered}, call_id=f"toolu_n{answered}") if answered < STEPS else reply_text(
            "all noted"
        )

    class HookedProvider(ScriptedProvider):
        def stream(self, request: ProviderRequest, **kw: object) -> Answer:  # type: ignore[override]
            answer = super().stream(request, **kw)  # type: ignore[arg-type]
            drains.step = sum(1 for m in request.messages if m["role"] == "assistant")
            drains.at("stream_end")
            return answer

    provider = HookedProvider(script)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: provider)
    monkeypatch.setattr(wiring, "run_tools", lambda settings, workspace, own=None, agent=None: by_name([note]))

    real_record = journal_module.RedisJournal.record

    def record(self, step_id, record, events, *, last=False, reads_next=False, writes_next=False):  # type: ignore[no-untyped-def]
        kind = "model" if step_id.startswith("model:") else "tool" if step_id.startswith("tool:") else None
        status = record.get("status")
        if kind == "model":
            drains.at("model_write")
        elif kind == "tool" and status == "done":
            drains.at("result_write")
        real_record(self, step_id, record, events, last=last, reads_next=reads_next, writes_next=writes_next)
        if kind == "model":
            drains.at("model_written")
        elif kind == "tool" and status == "committing":
            drains.at("committing_written")
        elif kind == "tool" and status == "done":
            drains.at("result_written")

    monkeypatch.setattr(journal_module.RedisJournal, "record", record)

    threads = ToolThreads()
    real_run = threads.run

    def run(job, name="baton-tool"):  # type: ignore[no-untyped-def]
        drains.at("thread_start")
        if drains.point == "thread_late" and drains.cancel is not None:
            # A starved thread (hundreds of units of a threads pool waking at once on a drain): it starts after the
            # grace the loop gives it. The hook is set before the delay, so the ordering is exact, not a race.
            drains.at("thread_late")
            threading.Timer(LATE_GRACE * 3, real_run, (job, name)).start()
            return
        real_run(job, name)

    monkeypatch.setattr(threads, "run", run)
    monkeypatch.setattr("agent.tools.round.tool_threads", lambda: threads)
    return settings


def _start_run(store: redis.Redis, workspace: Path) -> str:
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    owner = keys.owner("run", run_id)
    now = time.time()
    rec = UnitRecord(kind="run", owner_id=owner, unit_id=run_id, text="note every step", workspace=str(workspace),
                     task_id="task-0", created_at=now, updated_at=now)
    store.hset(keys.record(owner, run_id), mapping=hash_mapping(rec.to_hash()))
    store.sadd(keys.runs(keys.owner("run", run_id)), run_id)
    return run_id


def _drive(settings: Settings, run_id: str, drains: Drains, limit: int = 200) -> tuple[str, int]:
    """Execute the run until it settles, as workers would pick up each requeue: (final reason, executions)."""
    unit = Unit(Driver.CODING_RUN, keys.owner("run", run_id), run_id)
    for n in range(limit):
        execution = Execution(settings, unit, hostname=f"w{n}@windows", task_id=f"task-{n}")
        drains.cancel = lambda e=execution: e.cancel.cancel("drain")
        outcome = execution.run()
        if outcome.action != "requeue":
            return outcome.reason, n + 1
    raise AssertionError(f"run {run_id} did not settle in {limit} executions")


@pytest.mark.parametrize("point", POINTS)
def test_a_drain_at_any_point_of_the_step_cycle_runs_every_write_exactly_once(monkeypatch, store, tmp_path, point):
    """Drained once at `point` of each of its steps, a run still writes every note exactly once and completes,
    and no result in its transcript is the placeholder: a drain answers nothing, it only hands the run over."""
    notes: list[int] = []
    drains = Drains(point)
    settings = _harness(monkeypatch, store, drains, notes)
    run_id = _start_run(store, tmp_path)
    reason, executions = _drive(settings, run_id, drains)
    owner = keys.owner("run", run_id)
    record = {k.decode(): json.loads(v) for k, v in store.hgetall(keys.record(owner, run_id)).items()}
    assert (reason, record["status"]) == ("completed", "completed"), record.get("failure")
    assert drains.fired >= STEPS, f"the hook at {point} fired {drains.fired} times"
    assert sorted(notes) == list(range(STEPS)), f"notes written: {notes}"
    results = [
        b
        for m in (json.loads(raw) for raw in store.lrange(keys.transcript(owner), 0, -1))
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    ]
    assert len(results) == STEPS
    assert not [b for b in results if b["content"] == INTERRUPTED_RESULT]
    # A drain noticed once the final answer is in changes nothing: the run settles as completed, not requeued.
    assert record["interruptions"] == executions - 1 >= STEPS


_ = flow  # the module the executions come from (its name in a failure's traceback)
