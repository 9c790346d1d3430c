"""An execution's first round trip: it takes the lease only for an unfinished unit at its chat's head."""

from __future__ import annotations

import json

import fakeredis
import pytest

from tasks.store import keys
from tasks.store.lease import Lease
from tasks.store.take import take

OWNER = "chat:c1"


def _record(r: fakeredis.FakeRedis, unit: str, **fields: object) -> None:
    data = {"kind": "turn", "owner_id": OWNER, "unit_id": unit, "status": "queued", "history_len": -1, **fields}
    r.hset(keys.record(OWNER, unit), mapping={k: json.dumps(v) for k, v in data.items()})


def _take(r: fakeredis.FakeRedis, unit: str = "t1", *, check_head: bool = True):
    lease = Lease(r, keys.lease(OWNER), f"{unit}|w1|tok", ttl=30)
    return take(r, lease, owner_id=OWNER, unit_id=unit, hostname="w1", check_head=check_head)


def test_an_unfinished_head_takes_the_lease_and_reads_after_it():
    """The head of its chat's queue takes the lease, and gets the flags and the transcript up to its
    history_len (all of it for a turn not started yet)."""
    r = fakeredis.FakeRedis()
    r.rpush(keys.transcript(OWNER), "m0", "m1", "m2")
    r.rpush(keys.queue(OWNER), "t1")
    r.set(keys.stop(OWNER), "t1")
    r.set(keys.drain("w1"), "1")
    _record(r, "t1", history_len=2)
    taken = _take(r)
    assert taken.acquired is True and taken.head == "t1"
    assert (taken.stop, taken.draining, taken.transcript) == ("t1", True, [b"m0", b"m1"])
    assert r.get(keys.lease(OWNER)) == b"t1|w1|tok"
    assert json.loads(taken.record[b"status"]) == "queued"
    _record(r, "t2")
    r.delete(keys.lease(OWNER), keys.stop(OWNER), keys.drain("w1"))
    taken = _take(r, "t2", check_head=False)  # a run's unit: no queue to be at the head of
    assert taken.acquired is True and (taken.stop, taken.draining) == (None, False)
    assert taken.transcript == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("case", ["missing", "finished", "not the head", "empty queue"])
def test_the_lease_is_not_tried_for_a_unit_that_may_not_run(case):
    r = fakeredis.FakeRedis()
    r.rpush(keys.queue(OWNER), "t0", "t1")
    if case != "missing":
        _record(r, "t1", status="completed" if case == "finished" else "queued")
    if case == "empty queue":
        r.delete(keys.queue(OWNER))
    taken = _take(r)
    assert taken.acquired is None and r.get(keys.lease(OWNER)) is None
    assert taken.head == ({"not the head": "t0"}.get(case))
    assert bool(taken.record) is (case != "missing")


def test_a_held_lease_is_left_to_its_holder():
    r = fakeredis.FakeRedis()
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1")
    r.set(keys.lease(OWNER), "t1|other|tok")
    taken = _take(r)
    assert taken.acquired is False and taken.transcript is None
    assert r.get(keys.lease(OWNER)) == b"t1|other|tok"
