"""The sync client's wait on fakeredis: from the settled signal's tail an enqueue read, and from a first read."""

from __future__ import annotations

import time

import fakeredis
import pytest

from tasks.client.core import NotFound, SettledTails
from tasks.client.waiting import wait_settled
from tasks.store import keys, settled
from tasks.store.records import UnitRecord

OWNER = keys.owner("chat", "c1")


def _turn(store: fakeredis.FakeRedis, unit: str, status: str) -> None:
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id=unit, text="hi", task_id=f"task-{unit}",
                     created_at=time.time(), status=status)
    store.hset(keys.record(OWNER, unit), mapping=rec.to_hash())


def _settle(store: fakeredis.FakeRedis, unit: str) -> None:
    store.execute_command("XADD", keys.settled(OWNER), *settled.xadd_args(unit))


@pytest.fixture
def store() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


def test_from_the_tail_the_ending_is_read_once_the_signal_names_the_unit(store):
    """The signal's entries after the tail: another unit's ending is no news; this one's is, and its record is read."""
    _settle(store, "t0")  # before the enqueue: the tail is this entry
    tail = store.xrevrange(keys.settled(OWNER), count=1)[0][0].decode()
    _turn(store, "t1", "completed")
    _settle(store, "t1")
    result = wait_settled(store, OWNER, "t1", time.monotonic() + 5, tail)
    assert result.status == "completed"


def test_from_the_tail_a_timeout_reads_the_record_as_it_is(store):
    _turn(store, "t1", "running")
    result = wait_settled(store, OWNER, "t1", time.monotonic() + 0.05, "0-0")
    assert result.status == "running"


def test_an_unknown_unit_is_not_found_either_way(store):
    with pytest.raises(NotFound):
        wait_settled(store, OWNER, "nope", time.monotonic() + 5, None)
    with pytest.raises(NotFound):
        wait_settled(store, OWNER, "nope", time.monotonic() + 0.05, "0-0")


def test_the_tails_forget_the_oldest_and_hand_each_out_once():
    tails = SettledTails()
    for i in range(SettledTails.KEPT + 1):
        tails.note(OWNER, f"t{i}", f"{i}-0")
    assert tails.take(OWNER, "t0") is None  # the oldest, forgotten
    assert tails.take(OWNER, "t1") == "1-0" and tails.take(OWNER, "t1") is None
