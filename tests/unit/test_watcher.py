"""The watcher's beat: stop and drain flags looked at every poll, the lease renewed a third of a TTL at a time."""

from __future__ import annotations

import fakeredis
import pytest
import redis

from agent.cancel import CancelToken
from tasks.execution import watcher as watching
from tasks.store import keys
from tasks.store.lease import Lease

OWNER = keys.owner("chat", "c1")


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(watching.time, "monotonic", lambda: now[0])
    return now


def _watcher(r, ttl: float = 15.0):
    lease = Lease(r, keys.lease(OWNER), "t1|w@h|x|y", ttl)
    assert lease.acquire()
    cancel = CancelToken()
    return watching.Watcher(r, lease, owner_id=OWNER, unit_id="t1", hostname="w@h", cancel=cancel), cancel


def test_polls_between_renewals_only_read_the_flags(clock):
    """Until a third of the TTL has passed, a beat renews nothing and marks nothing; then it does both."""
    r = fakeredis.FakeRedis()
    watcher, cancel = _watcher(r)
    r.pexpire(keys.lease(OWNER), 9000)  # as if 6 s of the 15 s lease had gone by
    clock[0] += 4.0
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) <= 9000 and r.zscore(keys.ACTIVE, OWNER) is None
    clock[0] += 1.0
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) > 14000 and r.zscore(keys.ACTIVE, OWNER) is not None
    assert not cancel.is_set()


def test_a_stop_is_seen_on_the_next_light_poll(clock):
    """A stop for this unit cancels at the next beat, renewal due or not."""
    r = fakeredis.FakeRedis()
    watcher, cancel = _watcher(r)
    r.set(keys.stop(OWNER), "t1")
    clock[0] += 0.5
    watcher.tick()
    assert cancel.is_set() and cancel.reason == "stop"


def test_a_renewal_that_failed_is_tried_again_on_the_next_beat(clock, monkeypatch):
    """Redis unreachable at the renewal: the next beat renews again instead of waiting another third of a TTL."""
    r = fakeredis.FakeRedis()
    watcher, _ = _watcher(r)
    clock[0] += 5.0
    real = r.pipeline

    def broken(*args, **kwargs):
        pipe = real(*args, **kwargs)
        pipe.execute = lambda: (_ for _ in ()).throw(redis.exceptions.ConnectionError("down"))
        return pipe

    monkeypatch.setattr(r, "pipeline", broken)
    with pytest.raises(redis.exceptions.ConnectionError):
        watcher.tick()
    monkeypatch.setattr(r, "pipeline", real)
    r.pexpire(keys.lease(OWNER), 9000)
    clock[0] += 0.5
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) > 14000
