"""The store's JSON of a value is `json.dumps`'s, byte for byte (tasks/store/json_values.py)."""

from __future__ import annotations

import enum
import json

import pytest

from tasks.store.json_values import dumps, dumps_unicode


class Kind(enum.IntEnum):
    ONE = 1


class Name(str):
    pass


VALUES = [None, True, False, 0, -3, 10**40, Kind.ONE, 1.5, 1e300, -0.0, "", "a", 'quote " and \\ and \n',
          "é and \u2028 and \x00 and 😀", Name("sub"), {"a": [1, None, "é"], "b": {"c": True}}, [1, "x"], ()]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_same_bytes_as_json_dumps(value):
    assert dumps(value) == json.dumps(value)
    assert dumps_unicode(value) == json.dumps(value, ensure_ascii=False)


def test_what_json_refuses_is_refused():
    with pytest.raises(TypeError):
        dumps({1, 2})
    with pytest.raises(ValueError, match="Circular"):
        looped: list[object] = []
        looped.append(looped)
        dumps_unicode(looped)
