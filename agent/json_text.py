"""JSON text written by encoders made once: the canonical form estimates and digests measure, and the compact form
events are stored in.

`json.dumps` with arguments of its own builds a new encoder for every call, ~2 µs, which was most of what a small
value cost: a message's estimate (every message of a chat, once an execution), an event (several a turn), a tool
call's dedup key. These make the C encoder `json.dumps` uses once (`json.encoder.c_make_encoder`; where an
interpreter lacks it, a `JSONEncoder` made once) and write the same text `json.dumps` writes with those arguments.
No circular check: what they write is a tree of JSON values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(*, sort_keys: bool, default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """`json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=default)`."""
    if c_make_encoder is None:
        made = json.JSONEncoder(sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=default)
        return made.encode
    chunks = c_make_encoder(None, default, encode_basestring, None, ":", ",", sort_keys, False, True)
    return lambda value: "".join(chunks(value, 0))


canonical = _encoder(sort_keys=True, default=_unencodable)
"""Sorted keys, no spaces, UTF-8 kept: what an estimate, a reasoning digest or a dedup key is made of."""

compact = _encoder(sort_keys=False, default=str)
"""Keys in their order, no spaces, UTF-8 kept, what JSON cannot hold written as its `str`: a stored event."""
