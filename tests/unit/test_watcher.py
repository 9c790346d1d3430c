"""The watcher's beat: stop and drain flags looked at every poll, the lease renewed a third of a TTL at a time."""

from __future__ import annotations

import logging
import re
import time

import fakeredis
import pytest
import redis

from agent.loop.cancel import CancelToken
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


def test_a_beat_never_marks_a_unit_the_start_did_not(clock):
    """A beat refreshes the ACTIVE mark the fenced start wrote (XX): one racing the unit's deletion, which removed
    the mark, does not put the deleted unit back in the index."""
    r = fakeredis.FakeRedis()
    watcher, _ = _watcher(r)
    r.pexpire(keys.lease(OWNER), 9000)
    clock[0] += 5.0
    watcher.tick()
    assert r.zscore(keys.ACTIVE, OWNER) is None


def test_polls_between_renewals_only_read_the_flags(clock):
    """Until a third of the TTL has passed, a beat renews nothing and marks nothing; then it does both."""
    r = fakeredis.FakeRedis()
    watcher, cancel = _watcher(r)
    r.zadd(keys.ACTIVE, {OWNER: 1.0})  # the mark the fenced start writes; beats only refresh it
    r.pexpire(keys.lease(OWNER), 9000)  # as if 6 s of the 15 s lease had gone by
    clock[0] += 4.0
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) <= 9000 and r.zscore(keys.ACTIVE, OWNER) == 1.0
    clock[0] += 1.0
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) > 14000 and r.zscore(keys.ACTIVE, OWNER) > 1.0
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
        pipe.execute = lambda **_: (_ for _ in ()).throw(redis.exceptions.ConnectionError("down"))
        return pipe

    monkeypatch.setattr(r, "pipeline", broken)
    with pytest.raises(redis.exceptions.ConnectionError):
        watcher.tick()
    monkeypatch.setattr(r, "pipeline", real)
    r.pexpire(keys.lease(OWNER), 9000)
    clock[0] += 0.5
    watcher.tick()
    assert r.pttl(keys.lease(OWNER)) > 14000


# -- one poller for every unit of a process ---------------------------------------------------------------------


class CountingPipelines:
    """Counts the round trips (pipeline executions) made through a client."""

    def __init__(self, client) -> None:
        self.executed = 0
        real = client.pipeline

        def pipeline(*args, **kwargs):
            pipe = real(*args, **kwargs)
            execute = pipe.execute

            def counted(*a, **k):
                self.executed += 1
                return execute(*a, **k)

            pipe.execute = counted
            return pipe

        client.pipeline = pipeline


def _unit(r, n: int, hostname: str = "w@h", ttl: float = 15.0):
    owner = keys.owner("chat", f"c{n}")
    lease = Lease(r, keys.lease(owner), f"t{n}|{hostname}|x|y", ttl)
    assert lease.acquire()
    cancel = CancelToken()
    return watching.Watcher(r, lease, owner_id=owner, unit_id=f"t{n}", hostname=hostname, cancel=cancel), cancel


def test_one_beat_for_many_units_is_one_round_trip_and_a_stop_cancels_only_its_unit(clock):
    """Fifty units beat together in one pipelined round trip; a stop naming one cancels that one alone."""
    r = fakeredis.FakeRedis()
    units = [_unit(r, n) for n in range(50)]
    r.set(keys.stop(units[7][0].owner_id), "t7")
    r.set(keys.stop(units[8][0].owner_id), "someone-else")  # a stop for another turn of that chat
    trips = CountingPipelines(r)
    watching.beat(r, [w for w, _ in units])
    assert trips.executed == 1
    assert [n for n, (_, cancel) in enumerate(units) if cancel.is_set()] == [7]
    assert units[7][1].reason == "stop"


def test_a_beat_renews_only_the_leases_due_and_a_drain_cancels_the_drained_workers_units(clock):
    """Units started at different times are renewed each on its own schedule; the drain flag of one worker
    name cancels its units only (a process beating for two names keeps the other's running)."""
    r = fakeredis.FakeRedis()
    early, early_cancel = _unit(r, 1)
    clock[0] += 3.0
    late, late_cancel = _unit(r, 2, hostname="other@h")
    for w in (early, late):
        r.pexpire(keys.lease(w.owner_id), 9000)
        r.zadd(keys.ACTIVE, {w.owner_id: 1.0})  # the mark the fenced start writes; beats only refresh it
    clock[0] += 2.0  # early is 5 s old (due at a third of 15 s), late 2 s
    watching.beat(r, [early, late])
    assert r.pttl(keys.lease(early.owner_id)) > 14000 and r.zscore(keys.ACTIVE, early.owner_id) > 1.0
    assert r.pttl(keys.lease(late.owner_id)) <= 9000 and r.zscore(keys.ACTIVE, late.owner_id) == 1.0
    r.set(keys.drain("w@h"), "1")
    watching.beat(r, [early, late])
    assert early_cancel.reason == "drain" and not late_cancel.is_set()


def test_a_lease_taken_by_another_holder_is_lost_and_cancels(clock):
    """A renewal that finds another token on the lease marks it lost and cancels (as a drain: nothing to write)."""
    r = fakeredis.FakeRedis()
    (watcher, cancel), (other, other_cancel) = _unit(r, 1), _unit(r, 2)
    r.set(keys.lease(watcher.owner_id), "a newer execution")
    clock[0] += 5.0
    watching.beat(r, [watcher, other])
    assert watcher.lease_lost and cancel.reason == "drain"
    assert not other.lease_lost and not other_cancel.is_set()


def test_the_process_poller_beats_registered_units_and_forgets_stopped_ones():
    """Units started in one process share its one poller thread: a stop reaches a running unit within a beat;
    a unit that stopped is beaten no more, and the thread stays one however many units come and go."""
    r = fakeredis.FakeRedis()
    units = [_unit(r, n) for n in range(20)]
    for watcher, _ in units:
        watcher.start(poll=False)
    poller = watching.poller_for(r)
    try:
        assert len(poller) == 20
        assert sum(t.name == "baton-poller" for t in watching.threading.enumerate()) >= 1
        units[3][0].stop()
        r.set(keys.stop(units[3][0].owner_id), "t3")
        r.set(keys.stop(units[4][0].owner_id), "t4")
        assert units[4][1].wait(5), "the poller never saw the stop"
        assert units[4][1].reason == "stop"
        poller.beat()  # a whole beat after the stop was seen: the stopped unit was not in it
        assert not units[3][1].is_set() and len(poller) == 19
    finally:
        for watcher, _ in units:
            watcher.stop()
    assert len(poller) == 0


def test_a_cancellation_that_raises_does_not_keep_the_other_units_of_the_beat_from_theirs(clock):
    """Cancels run their callbacks in the poller's thread: one that raises is logged, the next unit still cancels."""
    r = fakeredis.FakeRedis()
    (first, first_cancel), (second, second_cancel) = _unit(r, 1), _unit(r, 2)
    first_cancel.on_cancel(lambda: 1 / 0)
    r.set(keys.drain("w@h"), "1")
    watching.beat(r, [first, second])
    assert first_cancel.reason == "drain" and second_cancel.reason == "drain"


def test_a_sigterm_drains_the_units_running_then_and_not_those_started_after(monkeypatch):
    """A SIGTERM to a pool child drains what it runs at that moment, at the poller's next beat even with Redis
    down; a unit started after it runs on (a child the signal reached alone goes on serving); with nothing
    running, the handler is told there is nothing to hand over."""
    monkeypatch.setattr(watching, "_signal_epoch", [0])
    monkeypatch.setattr(watching, "_units_here", [0])
    r = fakeredis.FakeRedis()
    assert watching.drain_on_signal() is False  # nothing runs here: the child ends as before
    before, cancel_before = _watcher(r)
    poller = watching.Poller(r)
    monkeypatch.setattr(watching, "poller_for", lambda client: poller)
    before.start(poll=False)
    assert watching.drain_on_signal() is True
    r.delete(keys.lease(OWNER))  # the second unit's own lease (the helper takes OWNER's)
    after, cancel_after = _watcher(r)
    after.start(poll=False)
    monkeypatch.setattr(watching, "beat", lambda *a, **k: (_ for _ in ()).throw(redis.ConnectionError("down")))
    with pytest.raises(redis.ConnectionError):
        poller.beat()
    assert cancel_before.reason == "drain" and not cancel_after.is_set()
    before.stop()
    after.stop()
    assert watching._units_here == [0]


def test_a_beat_that_comes_over_a_second_late_is_logged(caplog):
    """A process that stood still (a blocked event loop, a stopped or starved process) wakes late from the poller's
    pause, and a lease that lapses then may be taken by another worker while this one still runs the unit: the
    warning says so. A beat that is slow because the store is does not count (next test)."""
    r = fakeredis.FakeRedis()
    watcher, _ = _watcher(r)
    stalls = [1.2]

    def pause(seconds: float) -> None:
        time.sleep(seconds + (stalls.pop() if stalls else 0.0))  # once, the process stands still 1.2 s longer

    poller = watching.Poller(r, interval=0.05, pause=pause)
    with caplog.at_level(logging.WARNING, logger="baton.watcher"):
        poller.add(watcher)
        try:
            deadline = time.monotonic() + 10
            while "the beat came" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            poller.discard(watcher)
    late = re.search(r"the beat came (\d+\.\d) s late", caplog.text)
    assert late is not None and float(late.group(1)) >= 1.1, caplog.text


def test_a_beat_slow_because_the_store_is_is_not_called_late(monkeypatch, caplog):
    """A beat whose round trip takes 1.2 s (a failover, a restart: no other worker reaches the lease either) is the
    store's delay, not this process's, and says nothing of it."""
    r = fakeredis.FakeRedis()
    watcher, _ = _watcher(r)
    slow, real = [1.2], watching.beat
    beats: list[float] = []

    def slow_once(client, watchers, **kwargs):
        if watcher in watchers:  # this poller's beat (other tests' idle pollers beat too)
            beats.append(time.monotonic())
            if slow:
                time.sleep(slow.pop())
        real(client, watchers, **kwargs)

    monkeypatch.setattr(watching, "beat", slow_once)
    poller = watching.Poller(r, interval=0.05)
    with caplog.at_level(logging.WARNING, logger="baton.watcher"):
        poller.add(watcher)
        try:
            deadline = time.monotonic() + 10
            while len(beats) < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            poller.discard(watcher)
    assert len(beats) >= 4 and beats[1] - beats[0] >= 1.2  # the slow beat ran, and the poller went on after it
    assert "the beat came" not in caplog.text


@pytest.mark.parametrize(("value", "named"), [("t1", True), (keys.STOP_ALL, True), ("t2", False), ("", False),
                                              (None, False)])
def test_a_stop_key_names_its_unit_or_all_and_nothing_else(value, named):
    assert keys.stop_names(value, "t1") is named
