"""The encoders made once write what `json.dumps` writes with the same arguments: estimates, reasoning digests, dedup
keys and stored events are those of earlier versions."""

from __future__ import annotations

import datetime
import json

import pytest

from agent.json_text import canonical, compact

VALUES = [
    None, "", "é\u2028\x00\"\\ 日本 \U0001f600", 0, -0.0, 1.5, 1e16, 10**30, float("inf"), True, [], {},
    {"b": 1, "a": [1, {"d": None, "c": "x"}]}, [{"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}}],
]


@pytest.mark.parametrize("value", VALUES)
def test_canonical_is_json_dumps_sorted_compact_and_utf8(value):
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("value", VALUES)
def test_compact_is_json_dumps_in_order_compact_and_utf8(value):
    assert compact(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def test_what_json_cannot_hold_is_refused_by_canonical_and_written_as_its_str_by_compact():
    when = datetime.datetime(2026, 12, 6, 12, 0)
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical({"at": when})
    assert compact({"at": when, "n": 1}) == '{"at":"2026-12-06 12:00:00","n":1}'
