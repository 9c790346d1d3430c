"""Redis replies, typed in one place.

redis-py types every reply `bytes | str` (it cannot know whether a client decodes responses) and
some as unions of their RESP2 and RESP3 shapes. Baton's clients never decode responses (the fenced
Lua compares raw values and payloads may be binary), so they get bytes in RESP2 shapes; these
helpers turn such replies into what the code means, so the callers stay free of casts. A `str`
(from a client that does decode) is accepted as it is, so a test's fakeredis works either way.

RESP2's shapes are what redis-py's parsing hands back: on the wire redis-py 8 speaks RESP3 (a score is a
double, a WITHSCORES reply a list of pairs), which a reply read raw from a connection shows
(tasks/store/direct.py; tasks/store/indexes.py reads both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from redis.typing import EncodableT, FieldT, StreamRangeResponse, XReadResponse, ZSetRangeResponse

Entry = tuple[str, dict[bytes | str, bytes | str]]  # a stream entry: its id, and its fields as stored


def text(reply: bytes | str) -> str:
    """A reply as text (UTF-8, as Baton wrote it)."""
    return reply.decode() if isinstance(reply, bytes) else reply


def text_or_none(reply: bytes | str | None) -> str | None:
    """`text`, keeping a nil reply (a missing key) as None."""
    return None if reply is None else text(reply)


def texts(replies: Iterable[bytes | str]) -> list[str]:
    """Each member of a list or set reply as text."""
    return [text(r) for r in replies]


def blobs(replies: Iterable[bytes | str]) -> list[bytes]:
    """Each member of a list or hash-values reply as bytes (for a byte search across them)."""
    return [r if isinstance(r, bytes) else r.encode() for r in replies]


def stream_entries(reply: StreamRangeResponse | None) -> list[Entry]:
    """The entries of an XRANGE reply (or of one stream in an XREAD reply), ids as text."""
    # (None, None) stands for a deleted entry, which only XCLAIM-like commands return.
    return [(text(entry_id), fields) for entry_id, fields in reply or [] if entry_id is not None and fields is not None]


def read_entries(reply: XReadResponse) -> list[Entry]:
    """The entries of an XREAD reply, across its streams, in the order Redis returned them."""
    if isinstance(reply, dict):
        raise TypeError("a RESP3 XREAD reply; Baton's clients speak RESP2")
    return [entry for _stream, entries in reply for entry in stream_entries(entries)]


def read_streams(reply: XReadResponse) -> list[tuple[str, list[Entry]]]:
    """Each stream of an XREAD reply, its name as text, with its entries."""
    if isinstance(reply, dict):
        raise TypeError("a RESP3 XREAD reply; Baton's clients speak RESP2")
    return [(text(stream), stream_entries(entries)) for stream, entries in reply]


def members(reply: ZSetRangeResponse) -> list[str]:
    """The members of a sorted-set range reply read without scores, as text."""
    out: list[str] = []
    for item in reply:
        if not isinstance(item, bytes | str):
            raise TypeError("a sorted-set reply with scores")
        out.append(text(item))
    return out


def score_text(score: bytes | str | float) -> str:
    """A WITHSCORES reply's score as text, for `score_cast_func`: as Redis printed it (bytes), as redis-py 8.2
    hands it to a client that decodes replies (text already), or a RESP3 double as Python prints it, which reads
    back as the same number."""
    return score.decode() if isinstance(score, bytes) else str(score)


def scored_texts(reply: ZSetRangeResponse) -> list[tuple[str, str]]:
    """Members and scores of a WITHSCORES reply read with `score_cast_func=score_text`, both as text.

    The score is kept as Redis printed it, so it can be compared exactly with a later ZSCORE.
    """
    out: list[tuple[str, str]] = []
    for item in reply:
        if isinstance(item, bytes | str):
            raise TypeError("a sorted-set reply without scores")
        member, score = item
        if not isinstance(score, bytes | str):
            raise TypeError("scores not read with score_cast_func=score_text")
        out.append((text(member), text(score)))
    return out


def hash_mapping(fields: Mapping[str, str]) -> Mapping[FieldT, EncodableT]:
    """A str-keyed hash for `hset(mapping=...)`.

    redis-py declares that mapping with an invariant key type, so a `dict[str, str]` is refused
    although `hset` only reads it; this is the one place that says it is fine.
    """
    return cast("Mapping[FieldT, EncodableT]", fields)
