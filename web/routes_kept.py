"""Listing and deleting chats and runs: `GET /api/chats`, `GET /api/runs`, `DELETE /api/{chats|runs}/{id}`.

Behind `create_app(user=...)` a listing is only the signed-in person's (`user(request)`; nobody signed in: an empty
page), and with `authorize` each item is also one it allows. A delete is authorized like every route naming an id,
but a refused id answers what an unknown one does here, `{"id", "deleted": false}` with nothing deleted, not a
404: deleting is idempotent, so a refusal must read exactly as "nothing to delete". That is why these routes name
their id `ident`, outside `access.NAMED_BY`, and ask `authorize` themselves.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tasks.client import AsyncClient
from web import access, deps
from web.ids import check_id

router = APIRouter(prefix="/api")


async def _page(request: Request, kind: access.Kind, limit: int, before: str | None) -> dict[str, Any]:
    client: AsyncClient = request.app.state.client
    user = None
    if request.app.state.user is not None:
        user = await access.who(request, None)
        if user is None:
            return {f"{kind}s": [], "next": None}
    page = await (client.chats if kind == "chat" else client.runs)(user=user, limit=limit, before=before)
    items = [item for item in page.items if await access.allows(request, kind, item["id"])]
    return {f"{kind}s": items, "next": page.next}


@router.get("/chats")
async def chats(request: Request, limit: int = 50, before: str | None = None) -> dict[str, Any]:
    """`{"chats": [summary...], "next"}`, newest activity first (as `c.chats()`)."""
    return await _page(request, "chat", limit, before)


@router.get("/runs")
async def runs(request: Request, limit: int = 50, before: str | None = None) -> dict[str, Any]:
    """`{"runs": [summary...], "next"}`, newest activity first (as `c.runs()`)."""
    return await _page(request, "run", limit, before)


async def _delete(request: Request, client: AsyncClient, kind: access.Kind, ident: str, stop: bool) -> dict[str, Any]:
    check_id(ident, f"{kind}_id")
    if not await access.allows(request, kind, ident):
        return {"id": ident, "deleted": False}  # exactly what an unknown id answers: ids cannot be probed
    return await client.delete(ident, stop=stop, kind=kind)


@router.delete("/chats/{ident}")
async def delete_chat(ident: str, request: Request, client: deps.ClientDep, stop: bool = False) -> dict[str, Any]:
    """Delete a chat: `{"id", "deleted"}`; 409 while a turn is queued, running or waiting, unless `?stop=true`."""
    return await _delete(request, client, "chat", ident, stop)


@router.delete("/runs/{ident}")
async def delete_run(ident: str, request: Request, client: deps.ClientDep, stop: bool = False) -> dict[str, Any]:
    """Delete a run, as a chat."""
    return await _delete(request, client, "run", ident, stop)
