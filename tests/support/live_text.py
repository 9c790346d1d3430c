"""Folding a unit's stream the way a client must: text (and reasoning) deltas per attempt, minus discarded attempts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DISCARDING = ("turn.retry", "run.step")
# A unit that fails or stops mid-stream names the attempt it cut; that text is void too.
CUTTING = ("turn.failed", "turn.stopped", "run.failed", "run.stopped")


@dataclass
class Folded:
    """What a client that follows the contract's rule shows, and any breach of the rule it saw."""

    texts: dict[str, str] = field(default_factory=dict)  # message id -> text of its non-discarded attempts
    reasoning: dict[str, str] = field(default_factory=dict)  # message id -> reasoning of its non-discarded attempts
    discarded: set[tuple[str, int]] = field(default_factory=set)
    attempts: dict[str, list[int]] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)


def fold(entries: list[dict[str, Any]]) -> Folded:
    """Entries in stream order (dicts with `type`, as stored or as sent over SSE)."""
    out = Folded()
    parts: dict[tuple[str, str, int], list[str]] = {}  # (kind, message id, attempt) -> its deltas
    for entry in entries:
        kind = entry.get("type")
        if kind in ("text.delta", "reasoning.delta"):
            key = (entry["message_id"], entry["attempt"])
            if key in out.discarded:
                out.breaches.append(f"{kind} of {key} after its discard")
            seen = parts.setdefault((kind, *key), [])
            if entry["index"] != len(seen):
                out.breaches.append(f"{kind} {key} index {entry['index']} after {len(seen)} deltas")
            seen.append(entry["text"])
            tried = out.attempts.setdefault(key[0], [])
            if key[1] not in tried:
                if tried and key[1] < max(tried):
                    out.breaches.append(f"attempt {key[1]} of {key[0]} after attempt {max(tried)}")
                tried.append(key[1])
        elif (
            (kind in DISCARDING and entry.get("discarded")) or kind in CUTTING
        ) and entry.get("attempt") is not None:
            key = (entry["message_id"], entry["attempt"])
            out.discarded.add(key)
            for delta_kind in ("text.delta", "reasoning.delta"):
                parts.pop((delta_kind, *key), None)
    for (kind, message_id, _attempt), pieces in sorted(parts.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        into = out.texts if kind == "text.delta" else out.reasoning
        into[message_id] = into.get(message_id, "") + "".join(pieces)
    return out


def stream_entries(client: Any, key: str) -> list[dict[str, Any]]:
    """Every entry of a Redis events stream, decoded, with its stream id as `id`."""
    return [{**json.loads(fields[b"e"]), "id": sid.decode()} for sid, fields in client.xrange(key, "-", "+")]


def assistant_texts(messages: list[Any]) -> dict[str, str]:
    """The transcript's assistant messages by message id, as the model's text blocks read."""
    out: dict[str, str] = {}
    for message in messages:
        if message.role == "assistant" and message.message_id:
            out[message.message_id] = "".join(getattr(b, "text", "") for b in message.content if b.type == "text")
    return out


def assistant_reasoning(messages: list[Any]) -> dict[str, str]:
    """The transcript's assistant messages by message id, as their thinking blocks read (those that have words)."""
    out: dict[str, str] = {}
    for message in messages:
        if message.role == "assistant" and message.message_id:
            words = "".join(b.thinking for b in message.content if b.type == "thinking")
            if words:
                out[message.message_id] = words
    return out
