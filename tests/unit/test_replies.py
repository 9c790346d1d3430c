"""The typed edge over redis-py replies: real replies (fakeredis, bytes and decoded) come out as the code means them."""

from __future__ import annotations

import fakeredis
import pytest

from tasks.store import replies


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def store(request):
    return fakeredis.FakeRedis(decode_responses=request.param)


def _as_stored(store, value: str):
    """What a client hands back for a value Baton wrote: bytes, or str when it decodes responses."""
    return value if store.get_connection_kwargs().get("decode_responses") else value.encode()


def test_text_of_a_reply_and_of_a_nil_one(store):
    """A value reads as text whether the client decodes or not; a missing key stays None."""
    store.rpush("l", "t-1", "t-2")
    assert replies.text(store.lindex("l", -1)) == "t-2"
    assert replies.text_or_none(store.lindex("l", 5)) is None
    assert replies.texts(store.lrange("l", 0, -1)) == ["t-1", "t-2"]


def test_blobs_are_bytes_for_a_byte_search(store):
    """List and hash-value replies become bytes, so a task id can be looked for across them."""
    store.rpush("q", '{"id": "task-1"}')
    store.hset("h", "tag", '{"id": "task-2"}')
    joined = b"\n".join([*replies.blobs(store.lrange("q", 0, -1)), *replies.blobs(store.hvals("h"))])
    assert b"task-1" in joined and b"task-2" in joined


def test_stream_entries_from_xrange_and_xread(store):
    """XRANGE and XREAD entries keep Redis's order, with text ids and the fields as stored."""
    first = replies.text(store.xadd("s", {"e": '{"n": 1}'}))
    second = replies.text(store.xadd("s", {"e": '{"n": 2}'}))
    ranged = replies.stream_entries(store.xrange("s", "-", "+"))
    assert ranged == [
        (first, {_as_stored(store, "e"): _as_stored(store, '{"n": 1}')}),
        (second, {_as_stored(store, "e"): _as_stored(store, '{"n": 2}')}),
    ]
    assert [i for i, _ in replies.read_entries(store.xread({"s": first}, count=10))] == [second]
    assert replies.read_entries(store.xread({"s": second}, count=10)) == []
    assert replies.stream_entries(None) == []


def test_a_resp3_xread_reply_is_refused():
    """A dict-shaped (RESP3) XREAD reply is not silently misread as RESP2's list of streams."""
    with pytest.raises(TypeError):
        replies.read_entries({b"s": [[(b"1-0", {b"e": b"{}"})]]})


def test_sorted_set_members_and_exact_scores(store):
    """Members read as text; WITHSCORES with `score_cast_func=replies.score_text` keeps the score as Redis printed
    it."""
    store.zadd("z", {"chat:a": 1.5, "run:b": 1764581234.25})
    assert replies.members(store.zrangebyscore("z", "-inf", "+inf")) == ["chat:a", "run:b"]
    scored = replies.scored_texts(
        store.zrangebyscore("z", "-inf", "+inf", withscores=True, score_cast_func=replies.score_text)
    )
    assert scored == [("chat:a", "1.5"), ("run:b", "1764581234.25")]
    with pytest.raises(TypeError):
        replies.members(store.zrangebyscore("z", "-inf", "+inf", withscores=True))
    with pytest.raises(TypeError):
        replies.scored_texts(store.zrangebyscore("z", "-inf", "+inf"))
