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
