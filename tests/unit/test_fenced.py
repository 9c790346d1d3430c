"""The fenced write's own command: a stop flag is deleted inside the batch only if it names this unit."""

from __future__ import annotations

import fakeredis
import pytest

from agent.errors import LeaseLost, LeaseLostUnsent
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


def test_a_held_batch_goes_with_the_next_commit_of_commands_after_the_prelude():
    """The loop's last step rides with the settle: nothing is written when it is held, a flush of the prelude
    alone (live text) leaves it held, and the next commit writes prelude, held batch and its own in that order."""
    r = fakeredis.FakeRedis()
    r.set("lease", "tok")
    fence = Fence(r, "lease", "tok")
    texts = ["a"]
    fence.prelude = lambda: Batch().add("RPUSH", "log", texts.pop()) if texts else Batch()
    fence.hold(Batch().add("RPUSH", "log", "step"))
    assert r.lrange("log", 0, -1) == []
    fence.commit(Batch())  # the live text's own flush
    assert r.lrange("log", 0, -1) == [b"a"]
    texts.append("b")
    assert fence.commit(Batch().add("RPUSH", "log", "settle").read("LLEN", "log")) == [4]
    assert r.lrange("log", 0, -1) == [b"a", b"b", b"step", b"settle"]
    fence.commit(Batch().add("RPUSH", "log", "later"))
    assert r.lrange("log", 0, -1)[-1:] == [b"later"] and r.llen("log") == 5  # written once


def test_a_held_batch_under_a_lease_not_ours_writes_nothing():
    r = fakeredis.FakeRedis()
    r.set("lease", "someone-else")
    fence = Fence(r, "lease", "tok")
    fence.hold(Batch().add("SET", "step", "1"))
    with pytest.raises(LeaseLost):
        fence.commit(Batch().add("SET", "settled", "1"))
    assert r.get("step") is None and r.get("settled") is None


def test_a_held_batch_may_not_read():
    with pytest.raises(ValueError):
        Fence(fakeredis.FakeRedis(), "lease", "tok").hold(Batch().read("GET", "x"))


def test_scripts_in_one_trip_run_a_script_the_server_lost_once():
    """After a restart (SCRIPT FLUSH here) the pipeline's EVALSHA answers NOSCRIPT: that script is run on its own,
    which loads it, and it runs once; the one the server still had ran in the pipeline."""
    from tasks.store.scripts import registered, scripts_in_one_trip

    store = fakeredis.FakeRedis()
    count = registered(store, "return redis.call('INCR', KEYS[1])")
    store.execute_command("SCRIPT", "FLUSH")
    replies = scripts_in_one_trip(store, [(count, ["a"], []), (count, ["b"], [])])
    assert replies == [1, 1] and store.get("a") == b"1" and store.get("b") == b"1"
    assert scripts_in_one_trip(store, [(count, ["a"], []), (count, ["b"], [])]) == [2, 2]


def _lead(fence, batch, reads, seen):
    from tasks.store.journal import Riding

    return Riding(fence, batch, reads, lambda stop, draining: seen.append((stop, draining)))


def _holding(lease: str = "tok") -> tuple[fakeredis.FakeRedis, Fence, Batch]:
    """A store whose lease holds `lease`, a fence of token "tok" on it, and a read tool's result held on the fence."""
    r = fakeredis.FakeRedis()
    r.set("lease", lease)
    fence = Fence(r, "lease", "tok")
    result = Batch().add("RPUSH", "log", "result")
    fence.hold(result)
    return r, fence, result


def test_a_held_result_leads_the_next_preflight_with_the_prelude_ahead_and_its_reads_after():
    """A read tool's result rides the next model call's preflight: written first in that round trip (after the
    live text buffered ahead of it, as in every commit), its reads answered before the preflight's own reply."""
    from tasks.store.preflight import PREFLIGHT
    from tasks.store.scripts import registered

    r = fakeredis.FakeRedis()
    r.set("lease", "tok")
    r.set("stop", "t1")
    fence = Fence(r, "lease", "tok")
    texts = ["a"]
    fence.prelude = lambda: Batch().add("RPUSH", "log", texts.pop()) if texts else Batch()
    result = Batch().add("RPUSH", "log", "result")
    fence.hold(result)
    seen: list[tuple[str | None, bool]] = []
    PREFLIGHT.lead(_lead(fence, result, Batch().read("GET", "stop").read("EXISTS", "drain"), seen))
    admit = registered(r, "return redis.call('LLEN', KEYS[1])")
    assert PREFLIGHT.run(r, admit, ["log"], []) == 2  # the admission ran after the write
    assert r.lrange("log", 0, -1) == [b"a", b"result"] and seen == [("t1", False)]
    assert PREFLIGHT.run(r, admit, ["log"], []) == 2  # led once
    fence.commit(Batch().add("RPUSH", "log", "settle"))
    assert r.lrange("log", 0, -1) == [b"a", b"result", b"settle"]  # written once


def test_a_lead_whose_result_rode_a_commit_sends_nothing():
    """Another result of the round (or a park, the settle) committed first: the held result went with it, and
    the preflight carries no write of its own."""
    from tasks.store.preflight import PREFLIGHT
    from tasks.store.scripts import registered

    r, fence, result = _holding()
    seen: list[tuple[str | None, bool]] = []
    PREFLIGHT.lead(_lead(fence, result, Batch().read("GET", "stop"), seen))
    fence.commit(Batch().add("RPUSH", "log", "next"))
    admit = registered(r, "return redis.call('LLEN', KEYS[1])")
    assert PREFLIGHT.run(r, admit, ["log"], []) == 2
    assert r.lrange("log", 0, -1) == [b"result", b"next"] and seen == []


def test_a_lead_under_a_lease_not_ours_raises_lease_lost_and_writes_nothing():
    from tasks.store.preflight import PREFLIGHT
    from tasks.store.scripts import registered

    r, fence, result = _holding(lease="someone-else")
    PREFLIGHT.lead(_lead(fence, result, Batch().read("GET", "stop"), []))
    with pytest.raises(LeaseLostUnsent):  # the attempt it leads is not sent: its reservation settles to nothing
        PREFLIGHT.run(r, registered(r, "return 1"), ["x"], [])
    assert r.llen("log") == 0


def test_forget_drops_a_lead_the_execution_never_sent():
    """An execution that ended without another preflight (a crash, say) leaves nothing for the next one's."""
    from tasks.store.preflight import PREFLIGHT
    from tasks.store.scripts import registered

    r, fence, result = _holding()
    PREFLIGHT.lead(_lead(fence, result, Batch().read("GET", "stop"), []))
    PREFLIGHT.forget()
    assert PREFLIGHT.run(r, registered(r, "return 1"), ["x"], []) == 1
    assert r.llen("log") == 0
