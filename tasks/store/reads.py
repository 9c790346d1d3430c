"""Reading Baton's state from Redis: unit records, transcripts, a chat's queue head."""

from __future__ import annotations

import redis

from agent.messages import Message, load_messages
from tasks.store import keys
from tasks.store.records import UnitRecord
from tasks.store.replies import text


def load_record(client: redis.Redis, owner_id: str, unit_id: str) -> UnitRecord | None:
    return UnitRecord.from_hash(client.hgetall(keys.record(owner_id, unit_id)))


def load_transcript(client: redis.Redis, owner_id: str, end: int = -1) -> list[Message]:
    return parse_transcript(client.lrange(keys.transcript(owner_id), 0, end))


def parse_transcript(raw: list[bytes | str]) -> list[Message]:
    """Transcript entries as messages (an entry that is no message is skipped)."""
    return load_messages(raw)


def chat_head(client: redis.Redis, owner_id: str) -> str | None:
    """The chat's oldest unfinished turn; finished or unknown heads are cleared on the way."""
    rec = chat_head_record(client, owner_id)
    return rec.unit_id if rec is not None else None


def chat_head_record(client: redis.Redis, owner_id: str) -> UnitRecord | None:
    """The record of the chat's oldest unfinished turn (see `chat_head`)."""
    while True:
        head = client.lindex(keys.queue(owner_id), 0)
        if head is None:
            return None
        turn_id = text(head)
        rec = load_record(client, owner_id, turn_id)
        if rec is not None and not rec.terminal:
            return rec
        client.lrem(keys.queue(owner_id), 1, turn_id)
