"""A message sent while its chat is busy (`on_busy`): the enqueue script's decisions, and the stop they mark."""

from __future__ import annotations

import json

import fakeredis
import pytest

from agent.messages import INTERRUPTED_NOTICE, STOPPED_NOTICE, stop_notice
from tasks.client.core import ValidationError, check_on_busy
from tasks.execution.flow import Loaded, stopping
from tasks.store import keys
from tasks.store.enqueue import Enqueue, Enqueued
from tasks.store.records import UnitRecord

OWNER = keys.owner("chat", "c1")


@pytest.fixture
def store():
    return fakeredis.FakeRedis()


def _fields(turn_id: str, **fields: object) -> dict[str, str]:
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id=turn_id, text="hi", task_id=f"task-{turn_id}")
    return {**rec.to_hash(), **{k: json.dumps(v) for k, v in fields.items()}}


def _turn(store, turn_id: str, status: str, *, queued: bool = True, **fields: object) -> None:
    store.hset(keys.record(OWNER, turn_id), mapping=_fields(turn_id, status=status, **fields))
    store.rpush(keys.turns(OWNER), turn_id)
    if queued:
        store.rpush(keys.queue(OWNER), turn_id)


def _send(store, turn_id: str, on_busy: str) -> Enqueued:
    return Enqueue(store)(store, OWNER, turn_id, _fields(turn_id), "{}", 5.0, if_failed=True, on_busy=on_busy)


def _reason(store, turn_id: str) -> str | None:
    rec = UnitRecord.from_hash(store.hgetall(keys.record(OWNER, turn_id)))
    assert rec is not None
    return rec.stop_reason


def test_reject_writes_nothing_and_names_the_running_turn(store):
    """With a turn running and one queued behind it, `reject` hands back the running one and writes nothing."""
    _turn(store, "t1", "running")
    _turn(store, "t2", "queued")
    before = {k: store.dump(k) for k in store.scan_iter()}
    assert _send(store, "t3", "reject") == Enqueued(busy="t1")
    assert {k: store.dump(k) for k in store.scan_iter()} == before


def test_reject_passes_finished_turns_left_in_the_queue(store):
    """A finished turn not yet cleared from the queue does not make the chat busy; a queued one does."""
    _turn(store, "t1", "completed")
    assert _send(store, "t2", "reject") == Enqueued(ahead=1)  # t1 still counts for the position, not as busy
    _turn(store, "t3", "stopped")
    store.hset(keys.record(OWNER, "t2"), "status", json.dumps("queued"))
    assert _send(store, "t4", "reject") == Enqueued(busy="t2")


def test_interrupt_marks_every_unfinished_turn_and_stops_the_head(store):
    """`interrupt` marks the running turn and the queued ones `stop_reason: interrupt`, points the stop key at
    the running one, and queues the new turn behind them (its hand-off publishes it): all in the script."""
    _turn(store, "t1", "running")
    _turn(store, "t2", "queued")
    assert _send(store, "t3", "interrupt") == Enqueued(ahead=2)
    assert store.get(keys.stop(OWNER)) == b"t1"
    assert [_reason(store, t) for t in ("t1", "t2", "t3")] == ["interrupt", "interrupt", None]
    assert store.lrange(keys.queue(OWNER), 0, -1) == [b"t1", b"t2", b"t3"]


def test_interrupt_wakes_a_turn_parked_for_approval(store):
    """A head parked for approval holds no worker: the script puts it back to queued and names it to be sent."""
    _turn(store, "t1", "waiting", waiting_reason="approval")
    assert _send(store, "t2", "interrupt") == Enqueued(ahead=1, woken="t1")
    rec = UnitRecord.from_hash(store.hgetall(keys.record(OWNER, "t1")))
    assert rec is not None and (rec.status, rec.waiting_reason, rec.stop_reason) == ("queued", None, "interrupt")


def test_interrupt_of_an_idle_chat_is_a_plain_enqueue(store):
    _turn(store, "t1", "completed", queued=False)
    assert _send(store, "t2", "interrupt") == Enqueued(ahead=0)
    assert store.get(keys.stop(OWNER)) is None and _reason(store, "t1") is None


def test_enqueue_marks_nothing(store):
    _turn(store, "t1", "running")
    assert _send(store, "t2", "enqueue") == Enqueued(ahead=1)
    assert store.get(keys.stop(OWNER)) is None and _reason(store, "t1") is None


def test_two_interrupts_mark_the_first_new_turn_too(store):
    """A second interrupt before the first new turn ran stops that one as well: one turn runs, the last."""
    _turn(store, "t1", "running")
    _send(store, "t2", "interrupt")
    assert _send(store, "t3", "interrupt") == Enqueued(ahead=2)
    assert [_reason(store, t) for t in ("t1", "t2", "t3")] == ["interrupt", "interrupt", None]


def test_a_failed_last_turn_is_handed_back_before_anything_is_marked(store):
    """The failed-last-turn check (re-sending its text retries it) writes nothing, marks nothing."""
    _turn(store, "t0", "running")
    _turn(store, "t1", "failed", queued=False)
    assert _send(store, "t2", "interrupt") == Enqueued(failed_last="t1")
    assert store.get(keys.stop(OWNER)) is None and _reason(store, "t0") is None


def test_on_busy_is_checked():
    assert check_on_busy("interrupt") == "interrupt"
    with pytest.raises(ValidationError, match="on_busy must be one of enqueue, interrupt, reject"):
        check_on_busy("later")


def test_the_notice_says_why_the_turn_stopped():
    assert stop_notice(None) == STOPPED_NOTICE == "Stopped by user."
    assert stop_notice("interrupt") == INTERRUPTED_NOTICE == "Interrupted by a new message."


def test_an_interrupted_queued_turn_stops_as_it_starts():
    """The stop key names only the running turn; a queued one is stopped by its own record's mark."""
    loaded = Loaded(stop=None, draining=False, journal={}, live={}, transcript=[])
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id="t2")
    assert not stopping(loaded, rec)
    assert stopping(loaded, rec.model_copy(update={"stop_reason": "interrupt"}))
    assert stopping(Loaded(stop="t2", draining=False, journal={}, live={}, transcript=[]), rec)
