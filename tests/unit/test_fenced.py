"""The fenced write's own command: a stop flag is deleted inside the batch only if it names this unit."""

from __future__ import annotations

import fakeredis
import pytest

from agent.errors import LeaseLost
from tasks.store.fenced import Batch, Fence


@pytest.mark.parametrize(("flag", "kept"), [("t1", False), ("*", False), ("t2", True)])
def test_delete_if_deletes_only_a_flag_holding_one_of_the_values(flag, kept):
    """`t1`'s settle spends a stop for `t1` or for all, and leaves a stop meant for `t2` alone."""
    r = fakeredis.FakeRedis()
    r.set("lease", "tok")
    r.set("stop", flag)
    Fence(r, "lease", "tok").commit(Batch().delete_if("stop", "t1", "*").add("SET", "done", "1"))
    assert (r.get("stop") == flag.encode()) is kept and r.get("done") == b"1"


def test_delete_if_under_a_lease_not_ours_writes_nothing():
    r = fakeredis.FakeRedis()
    r.set("lease", "someone-else")
    r.set("stop", "t1")
    with pytest.raises(LeaseLost):
        Fence(r, "lease", "tok").commit(Batch().delete_if("stop", "t1"))
    assert r.get("stop") == b"t1"


def test_a_read_in_the_batch_sees_the_writes_before_it_and_returns_its_reply():
    """`Batch.read` runs in order inside the fenced write: the settle learns the queue's new head, without
    another round trip, after its own LREM; an empty queue's head comes back as None."""
    r = fakeredis.FakeRedis()
    r.set("lease", "tok")
    r.rpush("queue", "t1", "t2")
    fence = Fence(r, "lease", "tok")
    assert fence.commit(Batch().add("LREM", "queue", "1", "t1").read("LINDEX", "queue", "0")) == [b"t2"]
    assert fence.commit(Batch().add("LREM", "queue", "1", "t2").read("LINDEX", "queue", "0")) == [None]
    assert fence.commit(Batch().add("SET", "done", "1")) == []


def test_a_read_under_a_lease_not_ours_returns_nothing_and_writes_nothing():
    r = fakeredis.FakeRedis()
    r.set("lease", "someone-else")
    r.rpush("queue", "t1")
    with pytest.raises(LeaseLost):
        Fence(r, "lease", "tok").commit(Batch().add("LREM", "queue", "1", "t1").read("LINDEX", "queue", "0"))
    assert r.lrange("queue", 0, -1) == [b"t1"]
