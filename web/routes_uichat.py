"""The AI SDK's chat protocol (`useChat`, `DefaultChatTransport` of the `ai` package, 7.x) on `baton serve`.

`POST /api/chat` does what the transport's body asks (web/ui_request.py) and answers the turn's stream as UI
message chunks (web/ui_chunks.py) over SSE; `GET /api/chat/{id}/stream` (`reconnectToStream`, `useChat({resume:
true})`) replays the chat's unfinished turn from its start, 204 when there is none.

One reader, two encodings: the chunks come from the same reader as the native SSE stream (`tasks.store.tail`),
so resuming after an id, fencing by attempt (a discarded attempt's deltas precede its `turn.retry`) and the
keep-alive comment are that stream's, not written again. Every SSE message that ends an item's chunks carries
the item's stream id, so a client that sends `Last-Event-ID` gets what came after it (the fold before it is
replayed silently, so the client's open parts are known). Closing the response does not stop the turn; `POST
/api/chats/{id}/stop` does.

Two things events do not say, read here: a tool result's text (from the unit's journal, or the transcript
once the turn settled), and that a turn parked for an approval (a park writes no event; `AsyncClient.wait`
returns on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, HTTPException, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from agent.messages import ToolResultBlock, result_text
from tasks.client import AsyncClient, NotFound, Unavailable, ValidationError
from tasks.store import keys
from tasks.store.reads import parse_transcript
from tasks.store.records import TurnRef, UnitRecord
from tasks.store.tail import BLOCK_MS, START, entries_of, tail
from web import access, deps
from web.ids import check_id
from web.stream import NO_BUFFERING, SEND_TIMEOUT, parse_stream_id
from web.ui_chunks import Chunk, TurnChunks, advance, opening, parked, step_so_far
from web.ui_request import ChatIn, Decide, Regenerate, Send, asked

log = logging.getLogger("baton.web.uichat")

router = APIRouter()

UI_STREAM_HEADERS = {**NO_BUFFERING, "x-vercel-ai-ui-message-stream": "v1"}
SCAN = 200  # entries per XREVRANGE page when looking back for a turn's start
RECENT_TRANSCRIPT = 200  # transcript entries searched for a settled turn's tool result
PARK_WAIT = 3600.0  # one `wait` for the turn to park; it is simply waited again
CANCEL_WAIT = 1.0  # how long a cancelled read is waited for (see `_cancelled`)


async def named_chat(request: Request, raw: str) -> str:
    """`POST /api/chat`'s door from the body's chat id to a chat the caller may use: a valid id, and (where
    `create_app(authorize=...)` is given) one the caller is authorized for, else the 404 a refused chat gets on
    every route. (The stream route names its chat in its path: the routers' `access.authorized` asks for it.)"""
    chat_id = check_id(raw, "id")
    await access.authorize_or_hide(request, "chat", chat_id, NotFound(f"no chat {chat_id}"))
    return chat_id


@dataclass(frozen=True)
class Plan:
    """What one response streams: turn `turn_id`'s items after `after`; the fold runs silently through
    `quiet_through` (a resume's Last-Event-ID), or, for an approval's continuation (`after` being the call's
    `tool.approval_requested`), while items still belong to the park."""

    chat_id: str
    turn_id: str
    after: str
    quiet_through: str | None = None
    continuation: bool = False


@router.post("/api/chat")
async def chat(body: ChatIn, request: Request, client: deps.ClientDep) -> Response:
    """Send, retry or decide, as the transport's body asks; the answer is the turn's UI message stream."""
    chat_id = await named_chat(request, body.id)
    try:
        wanted = asked(body.trigger, body.messages)
    except ValueError as err:
        raise ValidationError(str(err)) from None
    store: aioredis.Redis = request.app.state.stream_redis
    owner = keys.owner("chat", chat_id)
    if isinstance(wanted, Send):
        ref = await client.send_message(
            chat_id, wanted.text, on_busy=body.on_busy, agent=body.agent, model=body.model,  # type: ignore[arg-type]
            user=await access.who(request, None), files=wanted.files,
        )
        plan = Plan(chat_id, ref.turn_id, await turn_start(store, owner, ref.turn_id))
    elif isinstance(wanted, Regenerate):
        retried = await client.retry(chat_id, kind="chat")
        assert isinstance(retried, TurnRef)  # kind="chat": never a run
        plan = Plan(chat_id, retried.turn_id, await turn_start(store, owner, retried.turn_id))
    else:
        plan = await decide(client, store, chat_id, wanted)
    return ui_response(request, client, plan)


@router.get("/api/chat/{chat_id}/stream", response_model=None)
async def resume(chat_id: str, request: Request, client: deps.ClientDep) -> Response:
    """The chat's unfinished turn (queued, running or waiting for an approval) from its start, as UI message
    chunks; with `Last-Event-ID`, what came after that id. 204 when no turn is unfinished."""
    seen = request.headers.get("last-event-id")
    try:
        quiet = parse_stream_id(seen.strip()) if seen and seen.strip() else None
    except ValueError as err:
        raise HTTPException(status_code=422, detail=str(err)) from None
    store: aioredis.Redis = request.app.state.stream_redis
    owner = keys.owner("chat", chat_id)
    turn_id = await unfinished_turn(store, owner)
    if turn_id is None:
        return Response(status_code=204)
    plan = Plan(chat_id, turn_id, await turn_start(store, owner, turn_id), quiet_through=quiet)
    return ui_response(request, client, plan)


async def decide(client: AsyncClient, store: aioredis.Redis, chat_id: str, wanted: Decide) -> Plan:
    """Approve or deny each answered call (deciding twice keeps the first decision), and stream the turn on
    from where the client's message stopped: the approval request of the first call."""
    owner = keys.owner("chat", chat_id)
    first = wanted.decisions[0].tool_use_id
    found = await find_back(store, keys.events(owner), lambda e: asks_approval_of(e, first))
    if found is None:
        raise ValidationError(f"no tool call {first} waits for approval in chat {chat_id}")
    for d in wanted.decisions:
        if d.approved:
            await client.approve(chat_id, d.tool_use_id, kind="chat")
        else:
            await client.deny(chat_id, d.tool_use_id, reason=d.reason, kind="chat")
    asked_at, event = found
    turn_id = str(event.get("turn_id"))
    return Plan(chat_id, turn_id, await turn_start(store, owner, turn_id), quiet_through=asked_at, continuation=True)


def asks_approval_of(item: dict[str, Any], tool_use_id: str) -> bool:
    return item.get("type") == "tool.approval_requested" and item.get("tool_use_id") == tool_use_id


def ui_response(request: Request, client: AsyncClient, plan: Plan) -> EventSourceResponse:
    settings = request.app.state.settings
    return EventSourceResponse(
        ui_stream(request.app.state.stream_redis, client, plan),
        headers=UI_STREAM_HEADERS,
        ping=settings.api_ping_interval,
        send_timeout=SEND_TIMEOUT,
    )


# -- the stream --------------------------------------------------------------------------------------

PARKED = "parked"  # the item the reader adds when the turn parks for an approval


async def ui_stream(store: aioredis.Redis, client: AsyncClient, plan: Plan) -> AsyncIterator[ServerSentEvent]:
    """The plan's turn as SSE messages of UI chunks, closed by `[DONE]` once the turn ends or parks."""
    owner = keys.owner("chat", plan.chat_id)
    state = TurnChunks(plan.turn_id)
    quiet = plan.quiet_through is not None
    step: list[Chunk] = []  # while quiet: the open step's chunks, which a resume mid-step sends again
    if not quiet:
        yield chunk_message(opening(state))
    try:
        async with contextlib.aclosing(turn_items(store, client, plan)) as items:
            async for stream_id, item in items:
                if quiet and still_quiet(plan, stream_id, item):
                    state, chunks = parked(state) if item is PARKED_ITEM else advance(state, item)
                    step = step_so_far(step, chunks)
                    if state.done:
                        break
                    continue
                if quiet:
                    quiet = False
                    for chunk in caught_up(plan, state, step):
                        yield chunk_message(chunk)
                if item is PARKED_ITEM:
                    state, chunks = parked(state)
                else:
                    if item.get("type") == "tool.result" and item.get("turn_id") == plan.turn_id:
                        item = {**item, "content": await result_content(store, owner, plan.turn_id, item)}
                    state, chunks = advance(state, item)
                for n, chunk in enumerate(chunks):
                    yield chunk_message(chunk, stream_id if n == len(chunks) - 1 and stream_id else None)
                if state.done:
                    break
    except (redis.ConnectionError, redis.TimeoutError) as err:
        # As the native stream: said, and ended; the client resumes (the turn goes on regardless).
        log.warning("ui stream of %s ended: store unavailable (%s)", plan.chat_id, type(err).__name__)
        yield chunk_message({"type": "error", "errorText": "the store (Redis) is unavailable; resume the stream"})
        return
    if quiet:  # the turn ended (or parked) within what the client already had
        for chunk in caught_up(plan, state, step):
            yield chunk_message(chunk)
    yield ServerSentEvent(data="[DONE]")


def caught_up(plan: Plan, state: TurnChunks, step: list[Chunk]) -> list[Chunk]:
    """What a quiet fold sends once it reaches news: `start`, and for a resume within a step, that step again.

    A new stream starts with no open text parts in the client (`createStreamingUIMessageState`), so a delta of
    the part it was reading would be refused: the step is reset and re-sent whole. An approval's continuation
    starts after the parked stream's `finish-step`, with nothing open."""
    if plan.continuation or not state.step_open or not step:
        return [opening(state)]
    return [opening(state), {"type": "reset-step"}, *step]


PARKED_ITEM: dict[str, Any] = {"type": PARKED}


def still_quiet(plan: Plan, stream_id: str, item: dict[str, Any]) -> bool:
    """Whether the fold is still catching up with what the client has (see `Plan`)."""
    assert plan.quiet_through is not None
    if item is PARKED_ITEM:
        return False
    if not _after(stream_id, plan.quiet_through):
        return True
    if not plan.continuation:
        return False
    # After the approval request the client saw, the park's own items (the round's other requests and
    # results) were in the stream that ended with it; the first other item of the turn is news.
    return item.get("turn_id") != plan.turn_id or item.get("type") in ("tool.approval_requested", "tool.result")


def _after(stream_id: str, other: str) -> bool:
    a, b = stream_id.split("-"), other.split("-")
    return (int(a[0]), int(a[1])) > (int(b[0]), int(b[1]))


def chunk_message(chunk: Chunk, stream_id: str | None = None) -> ServerSentEvent:
    data = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=data, id=stream_id) if stream_id else ServerSentEvent(data=data)


async def turn_items(
    store: aioredis.Redis, client: AsyncClient, plan: Plan
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """(stream id, item) of the chat's stream after `plan.after` (the shared reader, `tasks.store.tail`), live,
    with `PARKED_ITEM` (stream id "") once the turn parks for an approval: every item the park followed first."""
    key = keys.events(keys.owner("chat", plan.chat_id))
    park = asyncio.ensure_future(parked_at(client, store, plan))
    source = aiter(tail(store, key, plan.after, block_ms=BLOCK_MS))
    last = plan.after
    following: asyncio.Future[tuple[str, bytes]] | None = None
    stuck: asyncio.Future[tuple[str, bytes]] | None = None  # a cancelled read that has not ended yet
    try:
        while True:
            # Once the park is known, no new read starts: the rest comes by XRANGE up to it. (A resume of a turn
            # already parked sees the park at once; a read started after that and then cancelled could hang
            # until its XREAD BLOCK ran out, red in tests/js/history.test.mjs's approval case 1 run in 3.)
            if not park.done():
                following = asyncio.ensure_future(anext(source))
                await asyncio.wait({following, park}, return_when=asyncio.FIRST_COMPLETED)
                if following.done():
                    last, raw = following.result()
                    item = decode(last, raw)
                    if item is not None:
                        yield last, item
                    continue
                # Only ever waiting in XREAD here: nothing it read is lost.
                stuck = None if await _cancelled(following) else following
                following = None
            until = park.result()
            for stream_id, raw in entries_of(await store.xrange(key, f"({last}", until)):
                item = decode(stream_id, raw)
                if item is not None:
                    yield stream_id, item
            yield "", PARKED_ITEM
            return
    finally:
        park.cancel()
        # The reader must be idle before it is closed: one that would not stop is closed once it does.
        if following is not None and not await _cancelled(following):
            stuck = following
        if stuck is not None:
            stuck.add_done_callback(lambda _: asyncio.ensure_future(source.aclose()))  # type: ignore[attr-defined]
        else:
            await source.aclose()  # type: ignore[attr-defined]  # an async generator's


async def _cancelled(task: asyncio.Future[Any]) -> bool:
    """Cancel `task` and wait for it to end, at most CANCEL_WAIT seconds: whether it ended. Now and then a
    cancelled XREAD BLOCK of redis-py's does not end until its BLOCK does (a minute): the stream goes on without
    it rather than stand still (seen in tests/js/history.test.mjs's approval case: 44 s, in 1 run of 6)."""
    task.cancel()
    task.add_done_callback(_quiet)
    done, _ = await asyncio.wait({task}, timeout=CANCEL_WAIT)
    if not done:
        log.warning("a cancelled stream read has not ended after %.0f s: going on without it", CANCEL_WAIT)
    return bool(done)


def _quiet(task: asyncio.Future[Any]) -> None:
    """What a cancelled read ended with is of no interest (it is retrieved, so asyncio does not log it)."""
    if not task.cancelled():
        task.exception()


def decode(stream_id: str, raw: bytes | str) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        log.warning("skipping unreadable stream entry %s", stream_id)
        return None
    body["id"] = stream_id
    return body


async def parked_at(client: AsyncClient, store: aioredis.Redis, plan: Plan) -> str:
    """The stream's last id once the turn parks for an approval (the park follows every item of its execution);
    never returns for a turn that ends otherwise (its last event says so)."""
    ref = TurnRef(chat_id=plan.chat_id, turn_id=plan.turn_id, task_id="")
    while True:
        try:
            result = await client.wait(ref, timeout=PARK_WAIT)
        except (NotFound, Unavailable) as err:  # the stream's reader says what it can; a park is then not seen
            log.warning("ui stream of %s: not watching for a park (%s)", plan.chat_id, type(err).__name__)
            await asyncio.Event().wait()
            raise
        if result.status == "waiting" and result.waiting_reason == "approval":
            newest = entries_of(await store.xrevrange(keys.events(keys.owner("chat", plan.chat_id)), count=1))
            return newest[0][0] if newest else START
        if result.status in ("completed", "failed", "stopped"):
            await asyncio.Event().wait()  # the stream's own end event ends the response


# -- reads -------------------------------------------------------------------------------------------


async def find_back(
    store: aioredis.Redis, key: str, wanted: Callable[[dict[str, Any]], bool]
) -> tuple[str, dict[str, Any]] | None:
    """The newest entry of `key` that `wanted` accepts, looking back page by page."""
    before = "+"
    while True:
        page = entries_of(await store.xrevrange(key, before, "-", count=SCAN))
        for stream_id, raw in page:
            item = decode(stream_id, raw)
            if item is not None and wanted(item):
                return stream_id, item
        if len(page) < SCAN:
            return None
        before = f"({page[-1][0]}"


async def turn_start(store: aioredis.Redis, owner: str, turn_id: str) -> str:
    """Where a turn's stream starts (exclusive): before its latest `turn.queued` (a retry queues it again)."""
    found = await find_back(
        store, keys.events(owner), lambda e: e.get("type") == "turn.queued" and e.get("turn_id") == turn_id
    )
    return found[0] if found is not None else START  # the event itself shows nothing: starting after it is enough


async def unfinished_turn(store: aioredis.Redis, owner: str) -> str | None:
    """The chat's oldest turn that is queued, running or waiting (the head of its queue), if any."""
    for raw in await store.lrange(keys.queue(owner), 0, 9):
        turn_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        rec = UnitRecord.from_hash(await store.hgetall(keys.record(owner, turn_id)))
        if rec is not None and not rec.terminal:
            return turn_id
    return None


async def result_content(store: aioredis.Redis, owner: str, turn_id: str, item: dict[str, Any]) -> str | None:
    """A tool result's text: in the unit's journal while it runs or waits, in the transcript once it settled
    (a settle writes the one and deletes the other at once, so reading in that order cannot miss it)."""
    ident = str(item.get("tool_use_id"))
    rec = UnitRecord.from_hash(await store.hgetall(keys.record(owner, turn_id)))
    if rec is not None:
        raw = await store.hget(keys.journal(owner, turn_id, rec.generation), f"tool:{ident}")
        if raw:
            record = json.loads(raw)
            if record.get("status") == "done":
                return result_text(ToolResultBlock(tool_use_id=ident, content=record.get("content", "")).content)
    for message in reversed(parse_transcript(await store.lrange(keys.transcript(owner), -RECENT_TRANSCRIPT, -1))):
        for block in message.tool_results:
            if block.tool_use_id == ident:
                return result_text(block.content)
    return None
