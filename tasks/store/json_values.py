"""A field's or argument's JSON, the same bytes as `json.dumps` writes, sooner for the scalars most of them are.

`json.dumps` builds an encoder on every call that is not a plain string; a turn's writes encode some fifty values,
most of them None, booleans, integers and strings (a record's fields, a batch's arguments). Those take the C string
encoder or a constant here; anything else goes to the encoder, made once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

_ascii = json.JSONEncoder().encode
_unicode = json.JSONEncoder(ensure_ascii=False).encode
_CONSTANTS: dict[Any, str] = {None: "null", True: "true", False: "false"}


def _encoded(value: Any, string: Callable[[str], str], other: Callable[[Any], str]) -> str:
    kind = type(value)
    if kind is str:
        return string(value)
    if kind is int:
        return int.__repr__(value)
    if value is None or kind is bool:
        return _CONSTANTS[value]
    return other(value)


def dumps(value: Any) -> str:
    """`json.dumps(value)`: non-ASCII as `\\u` escapes."""
    return _encoded(value, encode_basestring_ascii, _ascii)


def dumps_unicode(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)`: non-ASCII as UTF-8 (a record's fields: see `UnitRecord.to_hash`)."""
    return _encoded(value, encode_basestring, _unicode)
