"""Live text's trailing edge: what a burst leaves buffered is written by the process's one flusher thread."""

from __future__ import annotations

import json
import threading

import fakeredis

from tasks.execution.live import FLUSH_SECONDS, RedisLiveText
from tasks.execution.trailing import TrailingFlusher
from tasks.store import keys
from tasks.store.fenced import Batch, Fence


class _Committed(Fence):
    """A real fence over fakeredis that says when a commit has written text."""

    def __init__(self, r: fakeredis.FakeRedis, lease_key: str) -> None:
        super().__init__(r, lease_key, "tok")
        self.wrote = threading.Event()

    def commit(self, batch: Batch, **kwargs):  # type: ignore[no-untyped-def, override]
        replies = super().commit(batch, **kwargs)
        self.wrote.set()
        return replies


def _unit(r: fakeredis.FakeRedis, n: int, flusher: TrailingFlusher | None = None) -> tuple[RedisLiveText, _Committed]:
    owner = keys.owner("chat", f"c{n}")
    r.set(keys.lease(owner), "tok")
    fence = _Committed(r, keys.lease(owner))
    return RedisLiveText(r, fence, owner_id=owner, unit_id=f"t{n}", generation=1, loaded={}, flusher=flusher), fence


def _texts(r: fakeredis.FakeRedis, n: int) -> list[str]:
    entries = r.xrange(keys.events(keys.owner("chat", f"c{n}")))
    return [json.loads(fields[b"e"])["text"] for _, fields in entries]


def test_the_rest_of_a_burst_is_written_once_its_interval_is_up():
    """The first delta goes at once; the two after it, inside the interval, go together in one write after it."""
    r = fakeredis.FakeRedis()
    live, fence = _unit(r, 0, TrailingFlusher())
    live.text("m1", 1, "a")
    assert _texts(r, 0) == ["a"]
    fence.wrote.clear()
    live.text("m1", 1, "b")
    live.text("m1", 1, "c")
    assert _texts(r, 0) == ["a"]
    assert fence.wrote.wait(20 * FLUSH_SECONDS)
    assert _texts(r, 0) == ["a", "bc"]


def test_a_closed_unit_gets_no_trailing_write():
    """After `close` the flusher's look writes nothing: the settle's own commit takes the buffered text."""
    r = fakeredis.FakeRedis()
    flusher = TrailingFlusher()
    live, fence = _unit(r, 0, flusher)
    live.text("m1", 1, "a")
    live.text("m1", 1, "b")
    live.close()
    fence.wrote.clear()
    other, other_fence = _unit(r, 1, flusher)  # asks after the closed unit: its write means the look was made
    other.text("m1", 1, "x")
    other_fence.wrote.clear()
    other.text("m1", 1, "y")
    assert other_fence.wrote.wait(20 * FLUSH_SECONDS)
    assert not fence.wrote.is_set() and _texts(r, 0) == ["a"]
    assert _texts(r, 1) == ["x", "y"]


def test_many_streaming_units_share_one_thread():
    """Fifty units each with text left buffered start one thread between them (they started one each)."""
    r = fakeredis.FakeRedis()
    before = threading.active_count()
    units = [_unit(r, n) for n in range(50)]
    for live, fence in units:
        live.text("m1", 1, "a")
        fence.wrote.clear()
        live.text("m1", 1, "b")
    assert threading.active_count() - before <= 1
    for _, fence in units:
        assert fence.wrote.wait(20 * FLUSH_SECONDS)
    assert all(_texts(r, n) == ["a", "b"] for n in range(50))
