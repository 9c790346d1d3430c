"""The resumable round: what is stored, when it is usable, and the state a resume starts from."""

from __future__ import annotations

import json

import pytest

from agent.history.rounds import (
    ROUND_VERSION,
    StoredRound,
    build_round,
    load_round,
    same_text,
    seed_state,
    usable_round,
)
from agent.loop.state import DedupEntry, LoopState, ToolLogEntry
from agent.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

OWNER, TURN, NOW, TTL = "chat-1", "turn-1", 1_000.0, 600.0


def _call(*ids: str, name: str = "lookup") -> Message:
    blocks = tuple(ToolUseBlock(id=i, name=name, input={"key": i}) for i in ids)
    return Message(role="assistant", content=(TextBlock(text="let me look"), *blocks), turn_id=TURN)


def _answer(*ids: str) -> Message:
    return Message(role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=f"value {i}") for i in ids))


def _state(*messages: Message, executed: tuple[str, ...] = ("lookup",)) -> LoopState:
    return LoopState(
        messages=list(messages),
        rounds_used=len(messages) // 2,
        dedup={"lookup:abc": DedupEntry(content="value a", is_error=False, mutations=0)},
        mutations=1,
        executed=list(executed),
        tool_log=[ToolLogEntry(id="a", name="lookup", effect="read", status="ok")],
    )


def _build(state: LoopState, *, max_bytes: int = 98_304, now: float = NOW) -> bytes | None:
    return build_round(state, owner_id=OWNER, turn_id=TURN, now=now, ttl=TTL, max_bytes=max_bytes)


def _stored() -> StoredRound:
    raw = _build(_state(_call("a"), _answer("a")))
    assert raw is not None
    stored = load_round(raw)
    assert stored is not None
    return stored


@pytest.mark.parametrize(("offset", "usable"), [(-0.001, True), (-TTL, True), (0.0, False), (0.001, False)])
def test_ttl_boundary(offset, usable):
    """Usable strictly before `stored_at + ttl`; at or after that instant it is gone."""
    stored = _stored()
    found = usable_round(stored, owner_id=OWNER, turn_id=TURN, now=NOW + TTL + offset)
    assert (found is stored) is usable
    assert (found is None) is not usable


@pytest.mark.parametrize(("owner", "turn"), [(OWNER, "turn-2"), ("chat-2", TURN), ("chat-2", "turn-2")])
def test_round_only_resumes_its_own_turn_of_its_own_owner(owner, turn):
    """A round stored for one turn of one chat is never offered to another turn or another chat."""
    assert usable_round(_stored(), owner_id=owner, turn_id=turn, now=NOW) is None


def test_no_round_is_not_usable():
    """An empty slot is simply no round."""
    assert usable_round(None, owner_id=OWNER, turn_id=TURN, now=NOW) is None


def test_nothing_executed_is_not_stored():
    """A round in which no tool ran saves nothing, so there is nothing to keep."""
    assert _build(_state(_call("a"), _answer("a"), executed=())) is None


def test_ceiling_exactly_at_is_stored_and_one_byte_over_is_not():
    """`max_bytes` is inclusive: a round of exactly that size is kept, one byte more is dropped."""
    state = _state(_call("a"), _answer("a"))
    size = len(_build(state) or b"")
    assert size > 0
    assert _build(state, max_bytes=size) is not None
    assert _build(state, max_bytes=size - 1) is None


def test_unserializable_content_gives_none_without_raising():
    """A tool input the serializer cannot encode makes the round unstorable, never an exception."""
    bad = Message(role="assistant", content=(ToolUseBlock(id="a", name="lookup", input={"k": object()}),))
    assert _build(_state(bad, _answer("a"))) is None


def test_structured_blocks_not_prose():
    """The stored JSON keeps tool_use and tool_result blocks with their ids, not a text summary."""
    raw = _build(_state(_call("a", "b"), _answer("a", "b")))
    assert raw is not None
    data = json.loads(raw)
    assert data["version"] == ROUND_VERSION and data["owner_id"] == OWNER and data["turn_id"] == TURN
    call, answer = data["messages"]
    uses = [b for b in call["content"] if b["type"] == "tool_use"]
    results = [b for b in answer["content"] if b["type"] == "tool_result"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        ("a", "lookup", {"key": "a"}),
        ("b", "lookup", {"key": "b"}),
    ]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [("a", "value a"), ("b", "value b")]


def test_incomplete_round_is_not_stored():
    """A tool_use whose result never came is not stored: alone it gives None, after complete rounds it is cut."""
    assert _build(_state(_call("a"))) is None
    assert _build(_state(_call("a", "b"), _answer("a"))) is None
    raw = _build(_state(_call("a"), _answer("a"), _call("b")))
    stored = load_round(raw)
    assert stored is not None
    assert [m.role for m in stored.messages] == ["assistant", "user"]
    assert stored.messages[0].tool_uses[0].id == "a"


def test_seed_state_advances_counters_and_marks_resumed():
    """A resume starts with the stored blocks in place and rounds, dedup, mutations and executed carried over."""
    stored = _stored()
    state = seed_state(stored)
    assert state.resumed is True
    assert state.messages == list(stored.messages)
    assert state.rounds_used == 1
    assert state.dedup == {"lookup:abc": DedupEntry(content="value a", is_error=False, mutations=0)}
    assert state.mutations == 1
    assert state.executed == ["lookup"]
    assert [e.id for e in state.tool_log] == ["a"]
    assert state.reply is None and state.usage.attempts == 0
    state.dedup["new"] = DedupEntry(content="x", is_error=False, mutations=1)
    assert "new" not in stored.dedup  # the stored round is not mutated through the state


@pytest.mark.parametrize("raw", [None, b"", b"not json", b"{}", b'{"version": 99}'])
def test_load_round_rejects_unreadable(raw):
    """Anything unreadable, incomplete or of another version is no round at all."""
    assert load_round(raw) is None


def test_load_round_rejects_other_version():
    """A round written by another version of the format is ignored rather than misread."""
    stored = _stored().model_copy(update={"version": ROUND_VERSION + 1})
    assert load_round(stored.model_dump_json()) is None


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("what is the weather", "what is the weather", True),
        ("what is  the weather\n", "  what is the\tweather", True),
        ("what is the weather", "what is the weather?", False),
        ("What is the weather", "what is the weather", False),
        ("whatis the weather", "what is the weather", False),
        ("", "   ", True),
    ],
)
def test_same_text_tolerates_whitespace_only(a, b, same):
    """A re-sent message matches when only whitespace differs; case, punctuation or joined words do not."""
    assert same_text(a, b) is same
