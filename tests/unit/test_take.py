"""An execution's first round trip: it takes the lease only for an unfinished unit at its chat's head."""

from __future__ import annotations

import json

import fakeredis
import pytest

from tasks.store import keys
from tasks.store.lease import Lease
from tasks.store.records import UnitRecord
from tasks.store.take import _TAKE, take
from tests.support.round_trips import count_round_trips

OWNER = "chat:c1"


def _record(r: fakeredis.FakeRedis, unit: str, *, ensure_ascii: bool | None = None, **fields: object) -> None:
    """A queued record with `fields`, written by `UnitRecord.to_hash` (or as `json.dumps` writes each field with
    `ensure_ascii`: clients before records kept UTF-8 wrote `ensure_ascii=True`)."""
    data = {"kind": "turn", "owner_id": OWNER, "unit_id": unit, "status": "queued", "history_len": -1, **fields}
    if ensure_ascii is None:
        mapping = UnitRecord.model_validate(data).to_hash()
    else:
        mapping = {k: json.dumps(v, ensure_ascii=ensure_ascii) for k, v in data.items()}
    r.hset(keys.record(OWNER, unit), mapping=mapping)


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


def test_the_transcript_is_read_behind_the_script_not_by_it(monkeypatch):
    """The script returns the transcript's length, and the `LRANGE` sent right behind it on the connection reads
    the list: no message goes through Lua. What was appended after the script (another writer's notice) is not the
    unit's: the read is cut at the script's length, and at a started generation's history_len."""
    from tasks.store.take import as_left

    r = fakeredis.FakeRedis()
    r.rpush(keys.transcript(OWNER), "m0", "m1", "m2")
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1")
    r.script_load(_TAKE)
    sent = count_round_trips(r, monkeypatch)
    assert _take(r).transcript == [b"m0", b"m1", b"m2"]
    assert sent == ["EVALSHA+LRANGE"]
    later = [b"m0", b"m1", b"m2", b"notice"]
    assert as_left(r, keys.transcript(OWNER), later, 3, -1) == [b"m0", b"m1", b"m2"]
    assert as_left(r, keys.transcript(OWNER), later, 3, 2) == [b"m0", b"m1"]


def test_a_transcript_read_that_ran_before_the_script_is_made_again():
    """A server that lost its scripts answers the EVALSHA with NOSCRIPT, and the script runs again after the read
    behind it, which then missed the user's message the start pushes: the shorter read is made again."""
    r = fakeredis.FakeRedis()  # no script loaded: the first EVALSHA is refused
    r.rpush(keys.transcript(OWNER), "m0")
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1", text="hello", generation=0, task_id="")
    reads: list[tuple[object, ...]] = []
    lrange = r.lrange

    def counted(*args, **kwargs):
        reads.append(args)
        return lrange(*args, **kwargs)

    r.lrange = counted
    taken = _take_starting(r)
    assert taken.started and len(taken.transcript) == 2 and taken.transcript[0] == b"m0"
    assert json.loads(taken.transcript[1])["content"][0]["text"] == "hello"
    assert reads == [(keys.transcript(OWNER), 0, 1)]


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


def _start(unit: str = "t1"):
    """The start batch exactly as the execution builds it for `take`."""
    from agent.loop.policy import Driver
    from config.settings import Settings
    from tasks.execution.flow import Execution
    from tasks.execution.settling import Unit
    from tasks.store.fenced import fill
    from tasks.store.take import HISTORY_LEN, TEXT

    execution = Execution(
        Settings(redis_url="redis://127.0.0.1:1/0"), Unit(Driver.CHAT_TURN, OWNER, unit), hostname="w1", task_id="k1"
    )
    return execution._first_start(fill(TEXT), fill(HISTORY_LEN), 1000.0)


def _take_starting(r: fakeredis.FakeRedis, unit: str = "t1"):
    lease = Lease(r, keys.lease(OWNER), f"{unit}|w1|tok", ttl=30)
    return take(r, lease, owner_id=OWNER, unit_id=unit, hostname="w1", check_head=True, start=_start(unit))


def test_a_first_start_is_written_with_the_lease():
    """The common case costs no round trip of its own: the user's message ends the transcript (and the history
    the execution reads), the record is running with that history_len, `turn.started` is out, the sweep sees it."""
    from agent.messages import dump_message, user_text

    r = fakeredis.FakeRedis()
    r.rpush(keys.transcript(OWNER), "m0", "m1")
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1", text='say "hi"\n\tback\\slash', generation=0, task_id="")
    taken = _take_starting(r)
    assert taken.acquired is True and taken.started is True
    raw = dump_message(user_text('say "hi"\n\tback\\slash', "t1")).encode()
    assert r.lrange(keys.transcript(OWNER), 0, -1) == [b"m0", b"m1", raw]
    assert taken.transcript == [b"m0", b"m1", raw]
    stored = {k.decode(): json.loads(v) for k, v in r.hgetall(keys.record(OWNER, "t1")).items()}
    assert (stored["status"], stored["history_len"], stored["task_id"]) == ("running", 3, "k1")
    assert stored["waiting_reason"] is None and stored["updated_at"] == 1000.0
    [(_, fields)] = r.xrange(keys.events(OWNER))
    event = json.loads(fields[b"e"])
    assert (event["type"], event["turn_id"], event["generation"]) == ("turn.started", "t1", 0)
    assert r.zscore(keys.ACTIVE, OWNER) == 1000.0


TEXTS = ["".join(map(chr, range(128))), "".join(map(chr, range(32, 127))), "plain", "", "é", "日本語",
         "emoji \U0001f600", "\u2028\u2029\x7f\u00a0", "C:\\users"]


@pytest.mark.parametrize("ensure_ascii", [None, True])
@pytest.mark.parametrize("text", TEXTS)
def test_the_message_take_writes_is_the_encoders_own_or_none(text, ensure_ascii):
    """The script puts the record's stored text where the message's text goes only when the result is exactly
    what `dump_message` writes; else (an escaped literal: a control character, or non-ASCII in a record written
    before records kept UTF-8) it writes nothing and leaves the start to the execution."""
    from agent.messages import dump_message, user_text

    r = fakeredis.FakeRedis()
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1", text=text, ensure_ascii=ensure_ascii)
    taken = _take_starting(r)
    pushed = r.lrange(keys.transcript(OWNER), 0, -1)
    if taken.started:
        assert pushed == [dump_message(user_text(text, "t1")).encode()]
    else:
        assert pushed == [] and json.loads(r.hget(keys.record(OWNER, "t1"), "status")) == "queued"
    escaped = "\\u" in json.dumps(text, ensure_ascii=bool(ensure_ascii))
    assert taken.started is (not escaped)
    assert taken.started is (text in TEXTS[1:4] or (not ensure_ascii and text in TEXTS[4:8]))


@pytest.mark.parametrize("case", ["retry", "started", "draining"])
def test_other_starts_are_left_to_the_execution(case):
    """A later generation, a generation already started, a draining worker: the lease is taken, nothing written."""
    r = fakeredis.FakeRedis()
    r.rpush(keys.transcript(OWNER), "m0")
    r.rpush(keys.queue(OWNER), "t1")
    _record(r, "t1", text="hi", **({"retry": {"generation": 1}, "started": {"history_len": 1}}.get(case, {})))
    if case == "draining":
        r.set(keys.drain("w1"), "1")
    taken = _take_starting(r)
    assert taken.acquired is True and taken.started is False
    assert r.lrange(keys.transcript(OWNER), 0, -1) == [b"m0"] and not r.exists(keys.events(OWNER))
    assert json.loads(r.hget(keys.record(OWNER, "t1"), "status")) == "queued"


def test_a_record_reads_back_from_its_hash_as_written():
    """`from_hash` parses the hash's fields as one JSON document: the same record as a `json.loads` a field and a
    validation of the dict would give, non-ASCII text, files, a failure (its `class` alias), usage and nulls
    included; a field the model does not know is ignored, a value that is not JSON refused."""
    from agent.messages import ImageBlock
    from tasks.store.records import Failure

    rec = UnitRecord(
        kind="turn", owner_id="chat:c", unit_id="t-1", status="failed", text='héllo "☃" 😀\n\\u0000', user=None,
        files=[ImageBlock(sha256="ab" * 32, media_type="image/png", bytes=70, name="a.png")],
        created_at=1796494830.3134308,
        failure=Failure.model_validate({"class": "provider_overloaded", "retryable": True, "message": "overloaded"}),
    )
    raw = {k.encode(): v.encode() for k, v in rec.to_hash().items()}
    raw[b"usage"] = json.dumps({"input_tokens": 10, "output_tokens": 5}).encode()
    raw[b"someday"] = b'{"a": [1, 2]}'
    assert UnitRecord.from_hash(raw) == UnitRecord.model_validate(
        {k.decode(): json.loads(v) for k, v in raw.items()}
    )
    back = UnitRecord.from_hash(raw)
    assert back is not None and (back.text, back.files, back.failure) == (rec.text, rec.files, rec.failure)
    with pytest.raises(ValueError):
        UnitRecord.from_hash({**raw, b"status": b"running"})
