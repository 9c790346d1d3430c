"""What a chat turn writes, round trip by round trip: the start rides with the lease, the last step with the
settle (a real execution on fakeredis, every command the execution's client sends counted)."""

from __future__ import annotations

import json
import time

import fakeredis
import pytest

from agent.loop.policy import Driver
from agent.provider.scripted import ScriptedProvider, reply_text
from config.settings import Settings
from tasks.execution import wiring
from tasks.execution.flow import Execution, Unit
from tasks.execution.settling import Outcome
from tasks.store import budgets, keys
from tasks.store.fenced import _FENCED
from tasks.store.records import UnitRecord
from tasks.store.take import _TAKE
from tests.support.round_trips import count_round_trips

SETTINGS = Settings(redis_url="redis://fake:6379/0", provider="scripted", queue="q", lease_ttl=3,
                    tools="bench.tools:TOOLS", backoff_scale=0)
OWNER = keys.owner("chat", "c1")
TAKE = "EVALSHA+LRANGE"  # the take's script, and the transcript read sent right behind it (tasks/store/take.py)


def queue_turn(store, text: str = "hi?") -> None:  # type: ignore[no-untyped-def]
    """Turn t1 of chat c1, queued at its chat's head with its record, as the client's enqueue leaves it."""
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id="t1", text=text, task_id="task-t1", created_at=time.time())
    store.hset(keys.record(OWNER, "t1"), mapping=rec.to_hash())
    store.rpush(keys.queue(OWNER), "t1")


def run_turn() -> Outcome:
    """One execution of turn t1, as a worker's task runs it."""
    return Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1").run()


@pytest.fixture
def store(monkeypatch):
    client = fakeredis.FakeRedis()
    # A server that has run them before: EVALSHA from the first call on.
    for script in (_TAKE, _FENCED, budgets.RESERVE, budgets.SETTLE):
        client.script_load(script)
    monkeypatch.setattr(wiring, "redis_client", lambda url: client)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: ScriptedProvider([reply_text("hi")]))
    return client


@pytest.mark.parametrize("budgeted", [False, True])
def test_a_turn_without_tools_is_a_take_and_a_settle(store, budgeted, monkeypatch):
    """Two round trips of the execution's own: take (with the start) and the settle (with the model step's journal
    record: its step count lands, and the text still buffered), and the attempt's budget reservation between them
    (with a budget that applies, its settlement too: two commands an attempt; with none, nothing is held). Live
    text the process's writer sends meanwhile goes in its own pipelines, not counted here. The events come in
    order: started, the text, completed."""
    if budgeted:
        budgets.set_budget(store, "all", None, 1_000_000, "month")
    queue_turn(store, 'a "quoted" question')
    sent = count_round_trips(store, monkeypatch)
    outcome = run_turn()
    assert outcome.action == "done" and outcome.reason == "completed"
    assert sent == [TAKE] + ["EVALSHA"] * (3 if budgeted else 2)
    stored = {k.decode(): json.loads(v) for k, v in store.hgetall(keys.record(OWNER, "t1")).items()}
    assert (stored["status"], stored["reply"], stored["steps"], stored["history_len"]) == ("completed", "hi", 1, 1)
    roles = [json.loads(m)["role"] for m in store.lrange(keys.transcript(OWNER), 0, -1)]
    assert roles == ["user", "assistant"]
    types = [json.loads(f[b"e"])["type"] for _, f in store.xrange(keys.events(OWNER))]
    assert types == ["turn.started", "text.delta", "turn.completed"]
    assert not store.exists(keys.journal(OWNER, "t1", 0), keys.lease(OWNER))
    assert store.zscore(keys.ACTIVE, OWNER) is None


@pytest.mark.parametrize("budgeted", [False, True])
def test_behind_the_rate_gate_a_turns_reservation_rides_with_its_admission(store, budgeted, monkeypatch):
    """The fleet's rate gate admits every attempt right after the budgets reserve it: the two scripts (two slots)
    go in one round trip, so a turn without tools is still three of the execution's own round trips (take, the
    attempt's budgets and gate, the settle), with a budget that applies a fourth (its settlement). Counted on the
    execution's thread: its commands and its pipelines, each pipeline one round trip."""

    from agent.provider.rate_gate import LimitedProvider
    from tasks.store import rate_limits
    from tasks.store.rate_limits import RedisGate

    for script in (rate_limits._ADMIT, rate_limits._SETTLE, rate_limits._OBSERVE):
        store.script_load(script)
    if budgeted:
        budgets.set_budget(store, "all", None, 1_000_000, "month")
    gated = LimitedProvider(ScriptedProvider([reply_text("hi")]), RedisGate(store, "anthropic|local|k"), limits=None,
                            max_wait=5.0)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: gated)
    queue_turn(store)
    trips = count_round_trips(store, monkeypatch)
    outcome = run_turn()
    assert outcome.action == "done" and outcome.reason == "completed"
    assert trips == [TAKE, "EVALSHA+EVALSHA", *(["EVALSHA"] if budgeted else []), "EVALSHA"]
    if budgeted:
        assert budgets.read_budget(store, "all")["reserved_tokens"] == 0  # settled: nothing left held


@pytest.mark.parametrize("budget", [None, "all", "user:ann"])
def test_a_message_that_says_whose_turn_it_is_has_its_first_preflight_asked_with_the_take(store, budget, monkeypatch):
    """When the message says whose turn it is, the take's round trip also asks the gate to admit the first attempt
    and reads whether any of the turn's budgets exists: with none, a turn without tools is two round trips of the
    execution's own (take, settle), not three. Where a budget applies, the reservation asks as before (with an
    admission of its own) and is settled; one that is spent refuses the attempt before anything is sent."""
    from agent.provider.rate_gate import LimitedProvider
    from tasks.store import rate_limits
    from tasks.store.rate_limits import RedisGate

    for script in (rate_limits._ADMIT, rate_limits._SETTLE, rate_limits._OBSERVE):
        store.script_load(script)
    spent = budget == "user:ann"
    if budget is not None:
        budgets.set_budget(store, budget, None, 1 if spent else 1_000_000, "month")
    gate = RedisGate(store, "anthropic|local|k")
    provider = ScriptedProvider([reply_text("hi")])
    gated = LimitedProvider(provider, gate, limits=None, max_wait=5.0)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: gated)
    monkeypatch.setattr(wiring, "gate_ahead", lambda s, c, a: gate)
    queue_turn(store)
    store.hset(keys.record(OWNER, "t1"), "user", json.dumps("ann"))
    trips = count_round_trips(store, monkeypatch)
    outcome = Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1",
                        user="ann").run()
    if spent:
        assert outcome.reason == "failed" and provider.requests == []
        failure = json.loads(store.hget(keys.record(OWNER, "t1"), "failure"))
        assert failure["class"] == "budget_exceeded", failure
        return
    assert outcome.reason == "completed"
    asked = f"{TAKE}+EVALSHA+EXISTS"  # the take, with the gate's admission and the budgets' existence
    # With a budget: the reservation and an admission of its own, the reservation's settlement, the settle.
    assert trips == ([asked, "EVALSHA"] if budget is None else [asked, "EVALSHA+EVALSHA", "EVALSHA", "EVALSHA"])
    if budget is not None:
        assert budgets.read_budget(store, budget)["reserved_tokens"] == 0  # settled: nothing left held


@pytest.mark.parametrize("cluster_keys", [False, True], ids=["one-redis", "cluster-keys"])
def test_a_read_tools_result_and_the_look_ride_the_next_calls_preflight(store, monkeypatch, cluster_keys):
    """A turn with one tool round behind the rate gate: the read tool's result is not a fenced write of its own but
    goes first in the next model call's preflight, and the stop and drain flags the loop looks at between the round
    and that call are read in that write, after the tool ran (keys laid out for one Redis and for a cluster, where
    this worker's drain flag has a copy on the unit's slot). A stop pressed while the tool ran is seen there: the
    next model step is never sent, and the result is kept."""

    from agent.provider.rate_gate import LimitedProvider
    from agent.provider.scripted import reply_tool
    from tasks.store import rate_limits
    from tasks.store.rate_limits import RedisGate

    monkeypatch.setattr(keys, "_cluster", [cluster_keys])  # the process's layout (`keys.use_cluster`), put back after
    monkeypatch.setattr(wiring, "store", lambda settings: store)  # as a cluster's client would, keeps that layout
    for script in (rate_limits._ADMIT, rate_limits._SETTLE, rate_limits._OBSERVE):
        store.script_load(script)
    command = store.execute_command
    stop_before_result: list[str] = []  # the unit whose stop is pressed just before its tool result is written
    provider = ScriptedProvider([])

    def before(sending: str) -> None:
        if len(trips) == 3 and stop_before_result:  # take, preflight, the model step; now the result's trip
            unit = stop_before_result.pop()
            command("SET", keys.stop(keys.owner("chat", unit)), unit)

    def run(unit: str) -> str:
        nonlocal provider
        provider = ScriptedProvider([reply_tool("peek", {"key": "a"}), reply_text("done")])
        gated = LimitedProvider(provider, RedisGate(store, "anthropic|local|k"), limits=None, max_wait=5.0)
        monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: gated)
        owner = keys.owner("chat", unit)
        rec = UnitRecord(kind="turn", owner_id=owner, unit_id=unit, text="hi?", task_id=f"task-{unit}",
                         created_at=time.time())
        command("HSET", keys.record(owner, unit), *[p for kv in rec.to_hash().items() for p in kv])
        command("RPUSH", keys.queue(owner), unit)
        trips.clear()
        return Execution(SETTINGS, Unit(Driver.CHAT_TURN, owner, unit), hostname="w@test", task_id=f"task-{unit}").run(
        ).reason

    trips = count_round_trips(store, monkeypatch, before=before)
    assert run("t1") == "completed"
    # take; preflight; the model step, sent ahead of its read tool; the tool's result with the next preflight; the
    # settle
    assert trips == [TAKE, "EVALSHA+EVALSHA", "EVALSHA ahead", "EVALSHA+EVALSHA+EVALSHA", "EVALSHA"]
    stop_before_result.append("t2")
    assert run("t2") == "stopped"
    assert trips[:4] == [TAKE, "EVALSHA+EVALSHA", "EVALSHA ahead", "EVALSHA+EVALSHA+EVALSHA"]
    assert "EVALSHA+EVALSHA" not in trips[4:]  # no other preflight: the stop ends the turn
    assert len(provider.requests) == 1  # the second model step was never sent
    transcript = [json.loads(m) for m in store.lrange(keys.transcript(keys.owner("chat", "t2")), 0, -1)]
    results = [b for m in transcript for b in m["content"] if b.get("type") == "tool_result"]
    assert [r["content"] for r in results] == ["value-of-a"], transcript


def planned_behind_the_gate(store, monkeypatch, provider, before=lambda sending: None):  # type: ignore[no-untyped-def]
    """`provider` behind the fleet's rate gate, whose admission needs nothing of the request (so it may be asked
    ahead); the round trips the execution's thread sends from here on, with `plan` where a request is planned."""
    from agent.loop import model_step
    from agent.provider.rate_gate import LimitedProvider
    from tasks.store import rate_limits
    from tasks.store.rate_limits import RedisGate

    for script in (rate_limits._ADMIT, rate_limits._SETTLE, rate_limits._OBSERVE):
        store.script_load(script)
    gate = RedisGate(store, "anthropic|local|k")
    gated = LimitedProvider(provider, gate, limits=None, max_wait=5.0)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: gated)
    monkeypatch.setattr(wiring, "gate_ahead", lambda s, c, a: gate)
    trips = count_round_trips(store, monkeypatch, before=before)
    plan = model_step.plan_request

    def planned(*args, **kwargs):  # type: ignore[no-untyped-def]
        trips.append("plan")
        return plan(*args, **kwargs)

    monkeypatch.setattr(model_step, "plan_request", planned)
    return trips


@pytest.mark.parametrize("case", ["ahead", "stopped", "lease lost", "budgeted"])
def test_a_read_rounds_end_sends_the_next_calls_preflight_before_that_request_is_planned(store, monkeypatch, case):
    """Where the next model call's preflight needs nothing of its request (no rate limits of the agent's own), the
    round's end sends it with the read tool's result, before the request is planned: the planning overlaps the round
    trip, and the call reads its replies before it is sent. A stop pressed while the tool ran is seen there, and the
    call never sent; so is a lease lost since the take (the execution ends writing nothing more). Once a budget of
    the unit was seen, nothing is sent ahead: its reservation asks as before, with the result and an admission."""
    from agent.provider.scripted import reply_tool

    if case == "budgeted":
        budgets.set_budget(store, "all", None, 1_000_000, "month")
    provider = ScriptedProvider([reply_tool("peek", {"key": "a"}), reply_text("done")])
    command = store.execute_command

    def before(sending: str) -> None:
        if sending == "EVALSHA+EVALSHA+EXISTS ahead" and case == "stopped":
            command("SET", keys.stop(OWNER), "t1")
        if sending == "EVALSHA+EVALSHA+EXISTS ahead" and case == "lease lost":
            command("SET", keys.lease(OWNER), "another execution's token")

    queue_turn(store)
    store.hset(keys.record(OWNER, "t1"), "user", json.dumps("ann"))
    trips = planned_behind_the_gate(store, monkeypatch, provider, before)
    outcome = Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1",
                        user="ann").run()
    asked = f"{TAKE}+EVALSHA+EXISTS"  # the take, with the first call's admission and the budgets' existence
    if case == "budgeted":
        assert outcome.reason == "completed"
        # each call's reservation with an admission (the second's behind the tool's result), then its settlement
        assert trips == [asked, "plan", "EVALSHA+EVALSHA", "EVALSHA", "EVALSHA ahead", "plan",
                         "EVALSHA+EVALSHA+EVALSHA", "EVALSHA", "EVALSHA"], trips
        assert budgets.read_budget(store, "all")["reserved_tokens"] == 0
        return
    # the take; the model step sent ahead of its read tool; the tool's result with the next call's admission and
    # the budgets' existence, sent before that request is planned; the settle (a stop's reads its reason first;
    # none after a lost lease)
    ahead = [asked, "plan", "EVALSHA ahead", "EVALSHA+EVALSHA+EXISTS ahead", "plan"]
    assert trips == ahead + {"ahead": ["EVALSHA"], "stopped": ["HGET", "EVALSHA"], "lease lost": []}[case], trips
    results = [b for m in store.lrange(keys.transcript(OWNER), 0, -1) for b in json.loads(m)["content"]
               if b.get("type") == "tool_result"]
    if case == "ahead":
        assert outcome.reason == "completed" and len(provider.requests) == 2
        assert [r["content"] for r in results] == ["value-of-a"]
    elif case == "stopped":
        assert outcome.reason == "stopped" and len(provider.requests) == 1  # the second call was never sent
        assert [r["content"] for r in results] == ["value-of-a"]  # the result is kept
    else:
        assert outcome.reason == "lease lost" and len(provider.requests) == 1
        assert json.loads(store.hget(keys.record(OWNER, "t1"), "status")) == "running"  # nothing more written


def test_a_write_rounds_end_asks_the_next_calls_preflight_so_the_call_has_no_round_trip_of_its_own(store, monkeypatch):
    """After a round whose results are written as they come (a write tool's), the round's end asks the next call's
    admission and the budgets' existence, sent before that request is planned: the call then sends nothing of its own
    before it goes. The flags the loop looks at came with the result's write, after the tool ran."""
    from agent.provider.scripted import reply_tool
    from agent.tools import by_name, tool

    @tool(effect="write")
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    provider = ScriptedProvider([reply_tool("note", {"text": "a"}, call_id="toolu_w"), reply_text("done")])
    monkeypatch.setattr(wiring, "chat_tools", lambda settings, agent=None: by_name([note]))
    queue_turn(store)
    store.hset(keys.record(OWNER, "t1"), "user", json.dumps("ann"))
    trips = planned_behind_the_gate(store, monkeypatch, provider)
    outcome = Execution(SETTINGS, Unit(Driver.CHAT_TURN, OWNER, "t1"), hostname="w@test", task_id="task-t1",
                        user="ann").run()
    assert outcome.reason == "completed" and len(provider.requests) == 2
    # the take (with the first call's asks); the step in the tool's write-ahead entry; the result with the flags; the
    # next call's asks, before its request is planned; the settle
    assert trips == [f"{TAKE}+EVALSHA+EXISTS", "plan", "EVALSHA", "EVALSHA", "EVALSHA+EXISTS ahead", "plan",
                     "EVALSHA"], trips


@pytest.mark.parametrize(("called", "expected"), [
    (["look"], ["look ran", "answer confirmed"]),
    (["note"], ["answer confirmed", "note ran"]),
    (["look", "note"], ["look ran", "answer confirmed", "note ran"]),
    (["note", "look"], ["answer confirmed", "note ran", "look ran"]),
])
def test_an_answer_whose_round_starts_with_a_read_tool_is_sent_ahead_of_it(store, monkeypatch, called, expected):
    """A model step whose round starts with a read tool is sent, the reads run while the store applies it, and its
    reply is read by the next write: the one that carries their results, or a write tool's write-ahead entry, which
    so comes after it, before that tool runs. One whose round starts with a write tool is confirmed before the tool
    runs (with its write-ahead entry, in the same write), as every step was."""
    from agent.messages import ToolUseBlock
    from agent.provider.scripted import ScriptedReply
    from agent.tools import by_name, tool
    from tasks.store.direct import SentAhead
    from tasks.store.fenced import Fence

    order: list[str] = []

    @tool(effect="read")
    def look(key: str) -> str:
        """Read a value."""
        order.append("look ran")
        return f"value-of-{key}"

    @tool(effect="write")
    def note(text: str) -> str:
        """Write a note."""
        order.append("note ran")
        return "noted"

    monkeypatch.setattr(wiring, "chat_tools", lambda settings, agent=None: by_name([look, note]))
    arguments = {"look": {"key": "a"}, "note": {"text": "a"}}
    calls = tuple(ToolUseBlock(id=f"toolu_{n}", name=n, input=arguments[n]) for n in called)
    provider = ScriptedProvider([ScriptedReply(content=calls), reply_text("done")])
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: provider)
    reply, commit = SentAhead.reply, Fence.commit

    def confirmed(self):  # type: ignore[no-untyped-def]
        order.append("answer confirmed")
        return reply(self)

    def committed(self, batch, **options):  # type: ignore[no-untyped-def]
        answer = any(arg == "model:0" for each in [batch, *self._held] for op in each.ops for arg in op[2:])
        out = commit(self, batch, **options)
        if answer:
            order.append("answer confirmed")
        return out

    monkeypatch.setattr(SentAhead, "reply", confirmed)
    monkeypatch.setattr(Fence, "commit", committed)
    queue_turn(store)
    outcome = run_turn()
    assert outcome.reason == "completed"
    assert order == expected
    transcript = [json.loads(m) for m in store.lrange(keys.transcript(OWNER), 0, -1)]
    assert [m["role"] for m in transcript] == ["user", "assistant", "user", "assistant"]
    results = transcript[2]["content"]
    assert [r["type"] for r in results] == ["tool_result"] * len(called) and not any(r["is_error"] for r in results)


def test_an_answer_whose_first_call_writes_is_written_with_that_calls_write_ahead_entry(store, monkeypatch):
    """A model step whose round starts with a write tool is not a write of its own: it goes in the tool's
    write-ahead entry's write, before the tool runs. The turn's round trips: the take, the first model call's budget
    reservation, that write, the tool's result (with the flags the loop looks at), the budgets' existence for the next
    call, asked at the round's end and read by its reservation, the settle (with the last step): six, one fewer than
    with a write for the step, and one of them waited for by nothing but the planning of the next request."""
    from agent.provider.scripted import reply_tool
    from agent.tools import by_name, tool

    journaled: list[list[str]] = []

    @tool(effect="write")
    def note(text: str) -> str:
        """Write a note."""
        steps = store.hgetall(keys.journal(OWNER, "t1", 0))
        journaled.append(sorted(f"{k.decode()}={json.loads(v)['status']}" for k, v in steps.items()))
        return "noted"

    monkeypatch.setattr(wiring, "chat_tools", lambda settings, agent=None: by_name([note]))
    provider = ScriptedProvider([reply_tool("note", {"text": "a"}, call_id="toolu_w"), reply_text("done")])
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: provider)
    queue_turn(store)
    trips = count_round_trips(store, monkeypatch)
    outcome = run_turn()
    assert outcome.reason == "completed"
    assert journaled == [["model:0=done", "tool:toolu_w=committing"]]  # both written before the tool ran
    assert trips == [TAKE, "EVALSHA", "EVALSHA", "EVALSHA", "EXISTS ahead", "EVALSHA"], trips
    types = [json.loads(f[b"e"])["type"] for _, f in store.xrange(keys.events(OWNER))]
    assert types == ["turn.started", "tool.called", "tool.result", "text.delta", "turn.completed"], types
