"""`GET /api/chat/{id}/messages`: the chat's history as the AI SDK's `UIMessage` list, what `useChat({messages})`
takes, so a page shows the whole chat after a reload (then `resume: true` replays the running turn over it).

The reads are here; the mapping is web/ui_messages.py's (which feeds web/ui_chunks.py, the stream's fold).
Settled turns come from the transcript (their live text is deleted a while after they settle); an unfinished
turn from its stream, read as `GET /api/chat/{id}/stream` reads it, so the message the history holds is the
one the resume replaces. Read in that order (the queue, then the transcript, then the streams) a turn that
settles meanwhile is still read whole: its live text outlives its settle by `BATON_LIVE_TEXT_RETENTION`.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Request

from tasks.store import keys
from tasks.store.reads import parse_transcript
from tasks.store.records import UnitRecord
from tasks.store.tail import BATCH, entries_of
from web.ids import check_id
from web.routes_uichat import decode, result_content, turn_start
from web.ui_messages import Item, Turn, UIMessage, history, turns_of

router = APIRouter()


@router.get("/api/chat/{chat_id}/messages")
async def messages(chat_id: str, request: Request) -> list[UIMessage]:
    """The chat's `UIMessage`s, oldest first; `[]` for a chat that has none (or that does not exist)."""
    store: aioredis.Redis = request.app.state.stream_redis
    owner = keys.owner("chat", check_id(chat_id, "chat_id"))
    unfinished = await unfinished_records(store, owner)
    transcript = parse_transcript(await store.lrange(keys.transcript(owner), 0, -1))
    turns = turns_of(transcript, [r.unit_id for r in unfinished])
    known = {t.turn_id: t for t in turns}
    for rec in unfinished:
        turn = known.get(rec.unit_id)
        if turn is None:  # queued, not started: its words are still only in its record
            turn = Turn(rec.unit_id, text=rec.text, files=tuple(rec.files))
            turns.append(turn)
        turn.items, turn.running = await stream_items(store, owner, rec.unit_id), True
        turn.parked = rec.status == "waiting" and rec.waiting_reason == "approval"
    return history(turns, chat_id)


async def unfinished_records(store: aioredis.Redis, owner: str) -> list[UnitRecord]:
    """The records of the chat's queued, running and waiting turns, in their queue's order."""
    out = []
    for raw in await store.lrange(keys.queue(owner), 0, -1):
        turn_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        rec = UnitRecord.from_hash(await store.hgetall(keys.record(owner, turn_id)))
        if rec is not None and not rec.terminal:
            out.append(rec)
    return out


async def stream_items(store: aioredis.Redis, owner: str, turn_id: str) -> list[Item]:
    """The chat's stream items from the turn's start until now, its tool results with their text (as the
    UI stream adds it)."""
    key, last = keys.events(owner), await turn_start(store, owner, turn_id)
    out: list[dict[str, Any]] = []
    while True:
        page = entries_of(await store.xrange(key, f"({last}", "+", count=BATCH))
        for last, raw in page:  # binds `last`: where the next page starts
            item = decode(last, raw)
            if item is None:
                continue
            if item.get("type") == "tool.result" and item.get("turn_id") == turn_id:
                item["content"] = await result_content(store, owner, turn_id, item)
            out.append(item)
        if len(page) < BATCH:
            return out
