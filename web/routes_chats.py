"""/api/chats: send a message, read a turn, retry, stop, the transcript and the live stream.

A chat exists as soon as it is named: its stream may be opened before its first message (a page opens
it, then posts), and a chat that has no turns yet has an empty transcript rather than a 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from sse_starlette import EventSourceResponse

from tasks.client.attachments import Attachment
from tasks.store import keys
from web import access, deps
from web.bodies import MessageIn
from web.ids import check_id
from web.stream import stream_response

router = APIRouter(prefix="/api/chats")


@router.post("/{chat_id}/messages", status_code=202)
async def send_message(chat_id: str, body: MessageIn, request: Request, client: deps.ClientDep) -> dict[str, Any]:
    """Enqueue a turn; answers as `baton send --json`. Behind `create_app(user=...)` it is `user(request)`'s."""
    files = [Attachment.from_base64(f.data, f.media_type, f.name) for f in body.files]
    ref = await client.send_message(
        check_id(chat_id, "chat_id"), body.text, on_busy=body.on_busy, agent=body.agent, model=body.model,  # type: ignore[arg-type]
        user=await access.who(request, None), files=files,
    )
    return (await client.turn(ref.chat_id, ref.turn_id)).model_dump(mode="json")


@router.get("/{chat_id}/files/{sha256}")
async def file(chat_id: str, sha256: str, client: deps.ClientDep) -> Response:
    """A file a message of the chat carries, with its type (authorized as the chat is: `access.authorized`)."""
    data, media_type = await client.file(check_id(chat_id, "chat_id"), sha256)
    # A file's hash names its bytes forever: a browser may keep it (privately: it is the chat's).
    return Response(data, media_type=media_type, headers={"cache-control": "private, max-age=31536000, immutable"})


@router.get("/{chat_id}/turns/{turn_id}")
async def turn(chat_id: str, turn_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """A turn's result now (as `baton send --wait --json`, without waiting)."""
    return (await client.turn(check_id(chat_id, "chat_id"), check_id(turn_id, "turn_id"))).model_dump(mode="json")


@router.post("/{chat_id}/retry", status_code=202)
async def retry(chat_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """Re-run the chat's failed last turn (422 when it has none); answers as `baton retry --json`."""
    ref = await client.retry(check_id(chat_id, "chat_id"), kind="chat")
    if hasattr(ref, "run_id"):  # the client resolved the id to a run of the same name
        return (await client.run_status(ref.run_id)).model_dump(mode="json")
    return (await client.turn(ref.chat_id, ref.turn_id)).model_dump(mode="json")


@router.post("/{chat_id}/stop")
async def stop(chat_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """Ask the chat's running or queued turn to stop; as `baton stop --json` (`stopped` false if nothing ran)."""
    out = await client.stop(check_id(chat_id, "chat_id"), kind="chat")
    return {"id": out["id"], "stopped": out["stopped"]}


@router.get("/{chat_id}/transcript")
async def transcript(chat_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """`{"id", "messages"}`, as `baton transcript --json`."""
    messages = await client.transcript(check_id(chat_id, "chat_id"), kind="chat")
    return {"id": chat_id, "messages": [m.model_dump(mode="json") for m in messages]}


@router.get("/{chat_id}/stream")
async def stream(chat_id: str, request: Request) -> EventSourceResponse:
    """The chat's live stream (SSE); resumable with Last-Event-ID or ?after=."""
    return stream_response(request, keys.owner("chat", check_id(chat_id, "chat_id")))
