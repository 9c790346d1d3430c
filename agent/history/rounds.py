"""The resumable round: built from the loop state on failure, stored, and judged on the next turn.

Pure: building, serializing and deciding are plain functions of their inputs (`now` passed in).
The Redis slot (GETDEL, TTL) lives at the edge.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.loop.state import DedupEntry, LoopState, ToolLogEntry
from agent.messages import Message

ROUND_VERSION = 1


class StoredRound(BaseModel):
    """What the next request would have been fed, structurally, plus the loop's bookkeeping."""

    model_config = ConfigDict(frozen=True)

    version: int = ROUND_VERSION
    owner_id: str  # the chat id or run id
    turn_id: str
    stored_at: float
    ttl: float
    messages: tuple[Message, ...]  # assistant tool_use messages and the user tool_result messages answering them
    dedup: dict[str, DedupEntry] = Field(default_factory=dict)
    mutations: int = 0
    executed: tuple[str, ...] = ()
    tool_log: tuple[ToolLogEntry, ...] = ()
    rounds_used: int = 0
    elided_before: int = 0  # the context budget's cut (agent/history/context.py), so a resume sends the same bytes
    token_scale: float = 1.0  # and the calibration it was decided with
    extra: dict[str, str] = Field(default_factory=dict)  # driver-specific position (a run's journal generation)


def build_round(
    state: LoopState, *, owner_id: str, turn_id: str, now: float, ttl: float, max_bytes: int
) -> bytes | None:
    """Serialize the round, or None: nothing executed, a half-finished round, over the ceiling, or unserializable.

    Only complete rounds are kept: every assistant tool_use answered by the user message after it.
    A truncated round would be a tool_result without its tool_use, so over the ceiling means not stored.
    Never raises: a failure to build just means the retry behaves as without this feature.
    """
    try:
        if not state.executed:
            return None
        messages = _complete_rounds(state.messages)
        if not messages:
            return None
        stored = StoredRound(
            owner_id=owner_id,
            turn_id=turn_id,
            stored_at=now,
            ttl=ttl,
            messages=tuple(messages),
            dedup=state.dedup,
            mutations=state.mutations,
            executed=tuple(state.executed),
            tool_log=tuple(state.tool_log),
            rounds_used=state.rounds_used,
            elided_before=state.elided_before,
            token_scale=state.token_scale,
        )
        data = stored.model_dump_json().encode()
    except (ValueError, TypeError, ValidationError):
        return None
    return data if len(data) <= max_bytes else None


def _complete_rounds(messages: list[Message]) -> list[Message]:
    """The longest prefix of assistant-call / user-result pairs in which every call is answered."""
    out: list[Message] = []
    i = 0
    while i + 1 < len(messages):
        call, answer = messages[i], messages[i + 1]
        if call.role != "assistant" or not call.tool_uses or answer.role != "user":
            break
        if {b.id for b in call.tool_uses} != {b.tool_use_id for b in answer.tool_results}:
            break
        out += [call, answer]
        i += 2
    return out


def load_round(raw: bytes | str | None) -> StoredRound | None:
    """Parse a slot's content; anything unreadable or of another version is no round at all."""
    if not raw:
        return None
    try:
        stored = StoredRound.model_validate_json(raw)
    except (ValueError, ValidationError):
        return None
    return stored if stored.version == ROUND_VERSION else None


def usable_round(stored: StoredRound | None, *, owner_id: str, turn_id: str, now: float) -> StoredRound | None:
    """A round resumes only the same turn of the same owner, and only before it expires."""
    if stored is None or stored.owner_id != owner_id or stored.turn_id != turn_id:
        return None
    if now >= stored.stored_at + stored.ttl:
        return None
    return stored


def seed_state(stored: StoredRound) -> LoopState:
    """The loop state a resumed turn starts from: blocks in place, counters advanced, dedup seeded."""
    return LoopState(
        messages=list(stored.messages),
        rounds_used=stored.rounds_used,
        dedup=dict(stored.dedup),
        mutations=stored.mutations,
        executed=list(stored.executed),
        tool_log=list(stored.tool_log),
        resumed=True,
        elided_before=stored.elided_before,
        token_scale=stored.token_scale,
    )


def same_text(a: str, b: str) -> bool:
    """A re-sent message counts as a retry when it matches but for whitespace."""
    return " ".join(a.split()) == " ".join(b.split())
