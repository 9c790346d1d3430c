"""`cap_result`: at most its limit, marker included, an exact count of what was cut, and idempotent.

Properties over lengths and limits (hypothesis, plus every small case exhaustively, where the marker's count
crosses from one digit count to the next), then the composition the tool path relies on: a result capped
by a tool's own cap, by `execute` and when recorded says what one cap of the original would have said.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agent.tools import cap_result

MARKED = re.compile(r"(.*)\n\[… ([1-9][0-9]*) characters cut …\]\n(.*)", re.DOTALL)


def marker_room(length: int) -> int:
    """The smallest limit with room for a marker over a `length`-character original (nothing else kept)."""
    return len(f"\n[… {length} characters cut …]\n")


def original(length: int) -> str:
    """A text whose every slice is distinct from its neighbours', so a wrong head or tail cannot pass."""
    return "".join(f"{i:x}." for i in range(length))[:length]


def assert_honest_cap(text: str, limit: int) -> str:
    capped = cap_result(text, limit)
    assert len(capped) <= limit or capped is text
    assert cap_result(capped, limit) == capped, "capping a capped result changed it"
    if len(text) <= limit:
        assert capped is text
        return capped
    parts = MARKED.fullmatch(capped)
    if parts is None:  # no room for a marker: the head alone
        assert limit < marker_room(len(text)) and capped == text[:limit]
        return capped
    head, cut, tail = parts.group(1), int(parts.group(2)), parts.group(3)
    assert len(capped) == limit, "a cap uses all of its room"
    assert text.startswith(head) and text.endswith(tail)
    assert cut == len(text) - len(head) - len(tail), "the marker must count exactly what is missing"
    kept = len(head) + len(tail)
    assert len(tail) == kept // 4, "the head keeps three quarters of what fits, the tail the rest"
    return capped


def test_every_small_length_and_limit():
    """Exhaustive over originals up to 400 characters (counts of 2 and 3 digits) and every limit up to them."""
    for length in range(400):
        text = original(length)
        for limit in range(length + 2):
            assert_honest_cap(text, limit)


@given(length=st.integers(0, 40_000), data=st.data())
def test_any_length_and_limit(length: int, data: st.DataObject):
    limit = data.draw(st.one_of(st.integers(0, length + 10), st.sampled_from([0, 1, 24, 25, 26, 200, 3000, 16_000])))
    assert_honest_cap(original(length), limit)


@given(text=st.text(max_size=600), limit=st.integers(0, 700))
def test_any_text(text: str, limit: int):
    """Any characters (newlines, brackets, ellipses), not just the synthetic original."""
    assert_honest_cap(text, limit)


@given(length=st.integers(0, 40_000), data=st.data())
def test_capping_again_to_a_smaller_limit_is_capping_once(length: int, data: st.DataObject):
    """A tool's cap, then `execute`'s, then the recorded one: the model is told what one cap would have said
    (for limits with room for a marker; below that only the head is kept, and no count can be carried)."""
    text = original(length)
    room = marker_room(length)
    first = data.draw(st.integers(room, max(room, length + 10)))
    second = data.draw(st.integers(room, first))
    assert cap_result(cap_result(text, first), second) == cap_result(text, second)


def test_the_issue_figures():
    """An 8 KB read under a 3,000-character cap: exactly 3,000 characters, and the same when served again."""
    text = original(8_192)
    capped = assert_honest_cap(text, 3_000)
    assert "[… 5219 characters cut …]" in capped
    assert cap_result(capped, 3_000) == capped


def test_a_marker_quoted_inside_a_text_is_just_text():
    """A file that quotes a marker (a log of an earlier result, say) is cut like any text: only the exact shape
    a cap leaves is read as an earlier cut."""
    text = original(2_000) + "\n[… 7 characters cut …]\n" + original(3_000)
    assert_honest_cap(text, 1_000)
