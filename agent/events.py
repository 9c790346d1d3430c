"""Event records: what `Client.events` returns and `baton events` prints, one JSON object each."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent.json_text import compact

EventType = Literal[
    "turn.queued",
    "turn.started",
    "turn.retry",
    "turn.resumed",
    "turn.completed",
    "turn.failed",
    "turn.stopped",
    "tool.called",
    "tool.result",
    "tool.approval_requested",
    "tool.approved",
    "tool.denied",
    "run.started",
    "run.step",
    "run.interrupted",
    "run.resumed",
    "run.completed",
    "run.failed",
    "run.stopped",
    "agent.changed",
]
EVENT_TYPES: frozenset[str] = frozenset(EventType.__args__)  # type: ignore[attr-defined]
# Live text rides in the same stream, so its order against the events is the stream's order; it is not
# one of the events `Client.events` returns, and it is deleted a while after its unit settles.
TEXT_DELTA = "text.delta"
REASONING_DELTA = "reasoning.delta"  # the model's reasoning as it streams: the fields and fencing of text.delta
LIVE_DELTAS = frozenset({TEXT_DELTA, REASONING_DELTA})
TERMINAL_TURN = frozenset({"turn.completed", "turn.failed", "turn.stopped"})
TERMINAL_RUN = frozenset({"run.completed", "run.failed", "run.stopped"})


class Event(BaseModel):
    """An event as read back: the stream id is its `id`; type-specific fields ride along as extras."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    type: str
    at: float
    chat_id: str | None = None
    run_id: str | None = None


def encode_event(kind: str, owner_id: str, data: dict[str, Any], *, at: float | None = None) -> str:
    """The stored form (the stream id is added on read). `owner_id` is `chat:ID` or `run:ID`."""
    if kind not in EVENT_TYPES and kind not in LIVE_DELTAS:
        raise ValueError(f"unknown event type {kind!r}")
    owner_kind, _, ident = owner_id.partition(":")
    body = {"type": kind, "at": time.time() if at is None else at, f"{owner_kind}_id": ident, **data}
    return compact(body)


def decode_event(stream_id: str, raw: str | bytes) -> Event | None:
    """Parse a stored event; an unreadable one is skipped rather than breaking the reader."""
    try:
        data = json.loads(raw)
        return Event(id=stream_id, **data)
    except (ValueError, TypeError):
        return None
