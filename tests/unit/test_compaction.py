"""A fenced batch leaves out the writes it overwrites itself, and the store ends the same as with every op run."""

from __future__ import annotations

import fakeredis
import pytest

from tasks.store.compaction import compacted
from tasks.store.fenced import Batch, Fence


def test_writes_to_a_key_the_batch_deletes_later_are_left_out():
    """The settle deletes the journal and the live marker the held last step wrote in the same script."""
    ops = [
        ["HSET", 3, "model:1", "{...}"],
        ["PEXPIRE", 3, "604800000"],
        ["XADD", 4, "MAXLEN", "~", "10000", "*", "e", "{}"],
        ["DEL", 3],
    ]
    assert compacted(ops) == [["XADD", 4, "MAXLEN", "~", "10000", "*", "e", "{}"], ["DEL", 3]]


def test_hsets_of_one_key_join_where_the_last_ran_with_each_fields_last_value():
    ops = [
        ["HSET", 2, "steps", "3", "usage", "u1"],
        ["RPUSH", 5, "m"],
        ["HSET", 2, "status", "done", "usage", "u2"],
    ]
    assert compacted(ops) == [["RPUSH", 5, "m"], ["HSET", 2, "steps", "3", "usage", "u2", "status", "done"]]


@pytest.mark.parametrize("between", [["=HGET", 2, "steps"], ["DELIFEQ", 2, "x"], ["PEXPIRE", 2, "1000"]])
def test_an_op_that_depends_on_the_key_keeps_what_came_before_it(between):
    """A read (or a write whose effect depends on the key's state) between two writes sees the first one."""
    ops = [["HSET", 2, "a", "1"], between, ["HSET", 2, "b", "2"]]
    assert compacted(ops) == ops
    if between[0] != "PEXPIRE":
        deleted = [["HSET", 2, "a", "1"], between, ["DEL", 2]]
        assert compacted(deleted) == deleted


def test_a_delete_with_nothing_before_it_and_ops_of_other_keys_are_kept():
    ops = [["DEL", 2], ["HSET", 3, "a", "1"], ["DEL", 4]]
    assert compacted(ops) == ops


def _settle_like() -> Batch:
    """The shape of a settle carrying the held last step: journal and live marker written, then deleted."""
    return (
        Batch()
        .hset("live", {"m1": {"started": 1}})
        .add("PEXPIRE", "live", "604800000")
        .hset("journal", {"model:1": {"content": "answer"}})
        .add("PEXPIRE", "journal", "604800000")
        .hset("rec", {"steps": 3, "usage": {"in": 10}})
        .add("RPUSH", "transcript", "m")
        .hset("rec", {"status": "completed", "usage": {"in": 20}})
        .read("HGET", "rec", "steps")
        .add("DEL", "journal")
        .add("DEL", "live")
        .add("LREM", "queue", "1", "t1")
        .read("LINDEX", "queue", "0")
    )


@pytest.mark.parametrize("compact", [True, False])
def test_a_compacted_settle_leaves_the_store_as_the_whole_batch_does(compact, monkeypatch):
    r = fakeredis.FakeRedis()
    r.set("lease", "tok")
    r.rpush("queue", "t1", "t2")
    r.hset("rec", "status", '"running"')
    batch = _settle_like()
    assert len(batch.ops) == 12
    if not compact:
        monkeypatch.setattr("tasks.store.fenced.compacted", lambda ops: ops)
    assert Fence(r, "lease", "tok").commit(batch) == [b"3", b"t2"]
    assert r.hgetall("rec") == {b"status": b'"completed"', b"steps": b"3", b"usage": b'{"in": 20}'}
    assert r.exists("journal", "live") == 0 and r.lrange("transcript", 0, -1) == [b"m"]
    assert len(compacted(batch.ops)) == 7  # 4 moot writes and one HSET fewer
