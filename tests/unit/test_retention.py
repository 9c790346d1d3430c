"""Retention: the sweep deletes what has been idle past `BATON_RETENTION`, never a busy unit."""

from __future__ import annotations

import json

import fakeredis
import pytest

from tasks.runtime import retention
from tasks.store import keys
from tests.unit.test_kept import _turn


@pytest.fixture(params=[False, True], ids=["plain", "cluster"])
def store(request):
    keys.use_cluster(request.param)
    yield fakeredis.FakeRedis()
    keys.use_cluster(False)


def test_the_decision_is_the_latest_of_the_index_and_the_record():
    assert retention.decide(10.0, None, 50.0) is None
    assert retention.decide(10.0, 40.0, 50.0) is None
    assert retention.decide(10.0, 60.0, 50.0) == 60.0
    assert retention.decide(55.0, 20.0, 50.0) == 55.0


def test_idle_chats_go_busy_and_recent_ones_stay(store):
    idle, busy, late = (keys.owner("chat", c) for c in ("idle", "busy", "late"))
    _turn(store, idle, "t1", now=100.0)
    _turn(store, busy, "t2", now=100.0, status="waiting")
    _turn(store, late, "t3", now=100.0)
    store.hset(keys.record(late, "t3"), "updated_at", json.dumps(990.0))  # a long turn that settled late
    assert retention.expire_idle(store, 0, 1000.0) == []  # 0: keep forever
    assert retention.expire_idle(store, 60, 1000.0) == [idle]
    assert not any(b":idle" in k for k in store.scan_iter())
    assert store.exists(keys.record(busy, "t2")) and store.exists(keys.record(late, "t3"))
    assert store.zscore(keys.by_last(late), late) == 990.0  # re-scored: looked at again when that is old enough
    assert retention.expire_idle(store, 60, 1100.0) == [late]


def test_a_doomed_unit_goes_once_settled_and_is_asked_to_stop_until_then(store):
    owner = keys.owner("chat", "d")
    _turn(store, owner, "t1", status="running")
    store.zadd(keys.doomed(owner), {owner: 1.0})
    assert retention.delete_doomed(store, 5.0) == []
    assert store.get(keys.stop(owner)) == b"t1"
    store.hset(keys.record(owner, "t1"), "status", json.dumps("stopped"))
    assert retention.delete_doomed(store, 6.0) == [owner]
    assert list(store.scan_iter()) == []
