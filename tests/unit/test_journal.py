"""The Redis journal: one fenced round trip per step, and nothing at all from a stale lease holder."""

from __future__ import annotations

import json

import fakeredis
import pytest

from agent.errors import LeaseLost
from tasks.store import journal as journal_module
from tasks.store import keys
from tasks.store.fenced import _FENCED, Fence
from tasks.store.journal import RedisJournal
from tests.support.round_trips import count_round_trips

OWNER, RUN = "run:r1", "r1"


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    r = fakeredis.FakeRedis()
    # A server that has run the fenced script before (any worker's first step loads it; redis-py then
    # falls back to SCRIPT LOAD once, on a server that never saw it, and uses EVALSHA from then on).
    r.script_load(_FENCED)
    r.set(keys.lease(OWNER), "token-a")
    return r


def _journal(client: fakeredis.FakeRedis, token: str = "token-a") -> RedisJournal:
    return RedisJournal(client, Fence(client, keys.lease(OWNER), token), owner_id=OWNER, unit_id=RUN, generation=0)


def test_each_step_is_one_round_trip_holding_the_record_the_step_count_and_the_events(client, monkeypatch):
    """`record` sends exactly one command (an EVALSHA) per step, and that one write carries the step's record,
    the run's step count and the step's events; a write-ahead `committing` entry counts no step."""
    journal = _journal(client)
    trips = count_round_trips(client, monkeypatch)
    steps = [
        ("model:0", {"kind": "model", "status": "done"}, [("run.step", {"step": "model:0"})]),
        ("tool:t1", {"kind": "tool", "status": "committing", "name": "record_note"}, []),
        ("tool:t1", {"kind": "tool", "status": "done", "name": "record_note"}, [("run.step", {"step": "tool:t1"})]),
    ]
    for step_id, record, events in steps:
        trips.clear()
        journal.record(step_id, record, events)
        assert trips == ["EVALSHA"], step_id

    stored = {k.decode(): json.loads(v) for k, v in client.hgetall(keys.journal(OWNER, RUN, 0)).items()}
    assert stored == {"model:0": steps[0][1], "tool:t1": steps[2][1]}
    assert json.loads(client.hget(keys.record(OWNER, RUN), "steps")) == 2
    written = [json.loads(fields[b"e"]) for _, fields in client.xrange(keys.events(OWNER))]
    assert [(e["type"], e["step"], e["run_id"]) for e in written] == [
        ("run.step", "model:0", "r1"),
        ("run.step", "tool:t1", "r1"),
    ]
    assert client.pttl(keys.journal(OWNER, RUN, 0)) > 0


def test_the_journal_expiry_is_set_by_an_executions_first_step_and_then_once_an_hour(client, monkeypatch):
    """A step sends no PEXPIRE of its own once its execution has armed the journal's expiry, until an hour has
    passed; a new execution (a resume) arms it again at its first step."""
    clock = [1000.0]
    monkeypatch.setattr(journal_module.time, "monotonic", lambda: clock[0])
    key = keys.journal(OWNER, RUN, 0)
    journal = _journal(client)
    journal.record("model:0", {"kind": "model", "status": "done"}, [])
    assert client.pttl(key) > 0
    client.persist(key)  # so that a later PEXPIRE shows
    clock[0] += 3599
    journal.record("tool:t1", {"kind": "tool", "status": "done"}, [])
    assert client.pttl(key) == -1
    clock[0] += 1
    journal.record("model:1", {"kind": "model", "status": "done"}, [])
    assert client.pttl(key) > 0
    client.persist(key)
    _journal(client).record("tool:t2", {"kind": "tool", "status": "done"}, [])
    assert client.pttl(key) > 0


def test_a_reopened_journal_replays_what_was_recorded(client):
    """A new execution reading the same generation sees every recorded step and continues the step count."""
    first = _journal(client)
    first.record("model:0", {"kind": "model", "status": "done"}, [])
    first.record("tool:t1", {"kind": "tool", "status": "committing"}, [])
    again = _journal(client)
    assert again.recorded("model:0") == {"kind": "model", "status": "done"}
    assert again.recorded("tool:t1") == {"kind": "tool", "status": "committing"}
    assert again.recorded("model:1") is None
    assert again.done_steps == 1


def test_a_stale_holder_writes_nothing_and_learns_it_lost_the_lease(client, monkeypatch):
    """Once another execution took the lease over, the old holder's step is refused inside Redis: its one
    command changes no journal entry, no step count and no event, and `record` raises LeaseLost."""
    stale = _journal(client)
    stale.record("model:0", {"kind": "model", "status": "done"}, [("run.step", {"step": "model:0"})])
    client.set(keys.lease(OWNER), "token-b")  # expired and taken over by a newer execution
    before = (
        client.hgetall(keys.journal(OWNER, RUN, 0)),
        client.hgetall(keys.record(OWNER, RUN)),
        client.xlen(keys.events(OWNER)),
    )
    trips = count_round_trips(client, monkeypatch)
    with pytest.raises(LeaseLost):
        stale.record("tool:t1", {"kind": "tool", "status": "done"}, [("run.step", {"step": "tool:t1"})])
    assert trips == ["EVALSHA"]
    trips.clear()
    with pytest.raises(LeaseLost):
        stale.emit([("run.step", {"step": "late"})])
    assert trips == ["EVALSHA"]
    after = (
        client.hgetall(keys.journal(OWNER, RUN, 0)),
        client.hgetall(keys.record(OWNER, RUN)),
        client.xlen(keys.events(OWNER)),
    )
    assert after == before
    assert stale.recorded("tool:t1") is None and stale.done_steps == 1


def test_a_lease_that_expired_with_no_new_holder_also_refuses_the_write(client):
    """No lease at all (expired, not yet taken over) is not ours either: the step is refused."""
    journal = _journal(client)
    client.delete(keys.lease(OWNER))
    with pytest.raises(LeaseLost):
        journal.record("model:0", {"kind": "model", "status": "done"}, [("run.step", {"step": "model:0"})])
    assert not client.exists(keys.journal(OWNER, RUN, 0)) and not client.exists(keys.events(OWNER))


def test_a_read_result_sent_at_a_rounds_end_is_confirmed_by_whichever_reads_first(client):
    """A read tool's result held for the next model call's preflight is sent at the round's end with that preflight's
    reads (`round_done`); its reply is read once, by the preflight or by the fence's next write, whichever comes
    first (a round the loop does not follow with a call: the settle). Either way the result is in the store, and a
    lease lost before it was written is raised by the first to read."""
    from agent.errors import LeaseLostUnsent
    from tasks.store.ahead import Ask
    from tasks.store.fenced import Batch
    from tasks.store.journal import Flags
    from tasks.store.preflight import PREFLIGHT

    def held_round(journal: RedisJournal) -> list[tuple[str | None, bool]]:
        seen: list[tuple[str | None, bool]] = []
        journal.flags = Flags(keys.stop(OWNER), "drain:w", read=lambda stop, draining: None,
                              later=lambda: lambda stop, draining: seen.append((stop, draining)))
        journal.asks = lambda: Ask(None, ["budget:all"])
        journal.record("tool:t1", {"kind": "tool", "status": "done", "name": "look"}, [])
        assert not client.hexists(keys.journal(OWNER, RUN, 0), "tool:t1")  # held for the next preflight
        journal.round_done()
        return seen

    try:
        journal = _journal(client)
        seen = held_round(journal)
        client.set(keys.stop(OWNER), "r1")  # after the write was sent: the flags it read said nothing
        journal._fence.commit(Batch().add("SET", keys.record(OWNER, RUN), "settled"))  # the settle reads it first
        assert client.hexists(keys.journal(OWNER, RUN, 0), "tool:t1")
        assert PREFLIGHT.no_budget(["budget:all"]) is True  # the preflight still takes what was asked, once
        assert seen == [(None, False)]

        PREFLIGHT.forget()
        client.delete(keys.journal(OWNER, RUN, 0), keys.stop(OWNER))
        stale = _journal(client, token="token-old")  # another execution holds the lease now
        held_round(stale)
        with pytest.raises(LeaseLost):
            stale._fence.commit(Batch().add("SET", keys.record(OWNER, RUN), "stale"))
        with pytest.raises(LeaseLostUnsent):
            PREFLIGHT.no_budget(["budget:all"])
        assert not client.hexists(keys.journal(OWNER, RUN, 0), "tool:t1")
        assert client.get(keys.record(OWNER, RUN)) == b"settled"
    finally:
        PREFLIGHT.forget()
