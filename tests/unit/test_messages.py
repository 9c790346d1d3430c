"""Stored messages read back: the one-pass parse and the tolerant one agree, and unreadable input is None."""

from __future__ import annotations

import json

import pytest

from agent.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    dump_message,
    load_message,
    load_messages,
)

STORED = [
    Message(role="user", content=(TextBlock(text="hello"),), turn_id="t-1"),
    Message(role="assistant", content=(TextBlock(text="looking"), ToolUseBlock(id="tu1", name="peek", input={"k": 1})),
            turn_id="t-1", message_id="t-1:m0"),
    Message(role="user", content=(ToolResultBlock(tool_use_id="tu1", content="v", is_error=True),), turn_id="t-1"),
]


@pytest.mark.parametrize("message", STORED)
def test_a_stored_message_reads_back_equal_from_text_bytes_and_dict(message):
    raw = dump_message(message)
    assert load_message(raw) == load_message(raw.encode()) == load_message(json.loads(raw)) == message


def test_a_block_this_version_does_not_know_is_dropped_and_the_rest_kept():
    raw = json.dumps({"role": "assistant", "future_field": 1, "content": [
        {"type": "thinking_v9", "data": "?"}, {"type": "text", "text": "kept"}]})
    assert load_message(raw) == Message(role="assistant", content=(TextBlock(text="kept"),))


@pytest.mark.parametrize("raw", ["not json", "[]", json.dumps({"role": "robot", "content": []}), b"\xff", "{}"])
def test_unreadable_messages_are_none(raw):
    assert load_message(raw) is None


FUTURE = json.dumps({"role": "assistant", "content": [{"type": "thinking_v9"}, {"type": "text", "text": "kept"}]})
TWO = dump_message(STORED[0]) + "," + dump_message(STORED[1])  # one entry holding two objects: no message


@pytest.mark.parametrize("extra", [[], [FUTURE], ["not json"], [TWO], [b"\xff"], ["{}"]], ids=[
    "all-readable", "unknown-block", "unreadable", "two-in-one", "bad-bytes", "empty-object"])
def test_a_history_reads_as_its_entries_read_one_by_one(extra):
    """The one pass over a whole history gives what each entry's own parse gives: the same messages, an unknown block
    dropped, an entry that is no message skipped (an entry of two objects too: it does not read as two)."""
    raw = [*(dump_message(m) for m in STORED[:2]), *extra, dump_message(STORED[2]).encode()]
    expected = [m for m in (load_message(r) for r in raw) if m is not None]
    assert load_messages(raw) == expected
    assert len(expected) == 3 + (extra == [FUTURE])
    assert load_messages([]) == []
