"""Live text's writer: every streaming unit's buffered text, written by the process's one thread in one round trip."""

from __future__ import annotations

import json
import threading

import fakeredis
import pytest

from tasks.execution.live import FLUSH_CHARS, FLUSH_SECONDS, RedisLiveText
from tasks.execution.live_writer import LiveWriter
from tasks.store import keys
from tasks.store.fenced import _FENCED, Batch, Fence
from tests.support.round_trips import count_round_trips


class _Committed(Fence):
    """A real fence over fakeredis that says when a commit of the unit's own was made."""

    def __init__(self, r: fakeredis.FakeRedis, lease_key: str) -> None:
        super().__init__(r, lease_key, "tok")
        self.committed = threading.Event()

    def commit(self, batch: Batch, **kwargs):  # type: ignore[no-untyped-def, override]
        replies = super().commit(batch, **kwargs)
        self.committed.set()
        return replies


class _Rounds(LiveWriter):
    """A writer whose rounds are made by the test (no thread)."""

    def __init__(self, r: fakeredis.FakeRedis) -> None:
        super().__init__(r, interval=FLUSH_SECONDS)
        self.asked = threading.Event()

    def ask(self, unit) -> None:  # type: ignore[no-untyped-def, override]
        with self._cv:
            self._asked[id(unit)] = unit
        self.asked.set()


def _unit(r: fakeredis.FakeRedis, n: int, writer: LiveWriter | None = None) -> tuple[RedisLiveText, _Committed]:
    owner = keys.owner("chat", f"c{n}")
    r.set(keys.lease(owner), "tok")
    fence = _Committed(r, keys.lease(owner))
    return RedisLiveText(r, fence, owner_id=owner, unit_id=f"t{n}", generation=1, loaded={}, writer=writer), fence


def _texts(r: fakeredis.FakeRedis, n: int) -> list[str]:
    entries = r.xrange(keys.events(keys.owner("chat", f"c{n}")))
    return [json.loads(fields[b"e"])["text"] for _, fields in entries]


def test_one_round_writes_every_units_buffer_in_one_round_trip(monkeypatch):
    """Twenty units' buffered deltas (two each, coalesced) go out in one round trip, of plain EVALSHA: no SCRIPT EXISTS
    (a pipeline of script objects asks it first, a round trip more); nothing is written before the round."""
    r = fakeredis.FakeRedis()
    writer = _Rounds(r)
    units = [_unit(r, n, writer) for n in range(20)]
    for live, _ in units:
        live.text("m1", 1, "a")
        live.text("m1", 1, "b")
    assert all(_texts(r, n) == [] for n in range(20))
    r.script_load(_FENCED)  # a server that has run it before (a fresh one answers NOSCRIPT, and it is run again)
    trips = count_round_trips(r, monkeypatch)
    writer.write_round()
    assert trips == ["+".join(["EVALSHA"] * 20)]
    assert all(_texts(r, n) == ["ab"] for n in range(20))
    assert not any(fence.committed.is_set() for _, fence in units)


def test_a_unit_writing_itself_is_left_to_its_own_write_and_asked_again():
    """A unit whose fence is busy is skipped, not waited for, and is in the next round."""
    r = fakeredis.FakeRedis()
    writer = _Rounds(r)
    live, fence = _unit(r, 0, writer)
    live.text("m1", 1, "a")
    with fence._lock:
        writer.write_round()
    assert _texts(r, 0) == []
    writer.write_round()
    assert _texts(r, 0) == ["a"]


def test_a_closed_unit_gets_no_write_from_the_writer():
    """After `close` the writer writes nothing for the unit: the settle's own commit takes the buffered text."""
    r = fakeredis.FakeRedis()
    writer = _Rounds(r)
    live, _ = _unit(r, 0, writer)
    live.text("m1", 1, "a")
    live.close()
    writer.write_round()
    assert _texts(r, 0) == []


def test_text_past_the_size_bound_is_written_by_the_streaming_thread():
    """A burst past FLUSH_CHARS does not wait for the writer."""
    r = fakeredis.FakeRedis()
    live, fence = _unit(r, 0, _Rounds(r))
    live.text("m1", 1, "x" * FLUSH_CHARS)
    assert fence.committed.is_set() and _texts(r, 0) == ["x" * FLUSH_CHARS]


def test_a_lost_lease_writes_nothing_and_spares_the_others():
    """A stale holder's buffered text is not published; the other units of the round are."""
    r = fakeredis.FakeRedis()
    writer = _Rounds(r)
    stale, _ = _unit(r, 0, writer)
    live, _ = _unit(r, 1, writer)
    r.set(keys.lease(keys.owner("chat", "c0")), "someone-else")
    stale.text("m1", 1, "old")
    live.text("m1", 1, "new")
    writer.write_round()
    assert _texts(r, 0) == [] and _texts(r, 1) == ["new"]


@pytest.mark.timeout(30)
def test_many_streaming_units_share_one_thread():
    """Fifty units with text buffered start one thread between them (they started one each), which writes it."""
    r = fakeredis.FakeRedis()
    writer = LiveWriter(r, interval=FLUSH_SECONDS)
    before = threading.active_count()
    units = [_unit(r, n, writer) for n in range(50)]
    for live, _ in units:
        live.text("m1", 1, "a")
        live.text("m1", 1, "b")
    assert threading.active_count() - before <= 1
    last = 0
    while last != 50:  # each round writes what was asked; wait on the stream, not on a clock
        found = r.xread({keys.events(keys.owner("chat", f"c{last}")): "0-0"}, block=5000)
        assert found, "the writer wrote nothing"
        last += 1
    assert all(_texts(r, n) == ["ab"] for n in range(50))


def test_reasoning_is_live_text_of_its_own_kind_in_stream_order_and_a_stop_voids_its_attempt():
    """Reasoning and text of one attempt are written as `reasoning.delta` and `text.delta` in the order they streamed,
    each kind's deltas numbered from 0 apart (a client places each in its own slot); an attempt that only reasoned so
    far is the one in flight, so a stop names it (its reasoning is void like text) and a worker taking the step over
    numbers its attempts after it."""
    r = fakeredis.FakeRedis()
    writer = _Rounds(r)
    live, _ = _unit(r, 0, writer)
    live.reasoning("m1", 1, "Let me ")
    live.reasoning("m1", 1, "think.")
    live.text("m1", 1, "Answer")
    live.reasoning("m1", 1, " More.")
    writer.write_round()
    entries = [json.loads(f[b"e"]) for _, f in r.xrange(keys.events(keys.owner("chat", "c0")))]
    assert [(e["type"], e["index"], e["text"]) for e in entries] == [
        ("reasoning.delta", 0, "Let me think."), ("text.delta", 0, "Answer"), ("reasoning.delta", 1, " More."),
    ]  # fmt: skip
    assert all((e["turn_id"], e["message_id"], e["attempt"]) == ("t0", "m1", 1) for e in entries)
    thinker, _ = _unit(r, 1, writer)
    thinker.reasoning("m2", 1, "Only thinking so far.")
    assert thinker.cut() == ("m2", 1)
    writer.write_round()
    assert thinker.begin("m2").attempts_before == 1
