"""POST /api/{chats|runs}/{id}/approvals/{tool_use_id}: a person approves or denies a waiting tool call."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request

from tasks.client import AsyncClient
from web import access, deps
from web.bodies import DecisionIn

router = APIRouter(prefix="/api")


# Two paths rather than one `/{kind}/{id}/...`: `{chat_id}` and `{run_id}` are how a route names what it touches,
# and so what web/access.py authorizes.
@router.post("/chats/{chat_id}/approvals/{tool_use_id}", response_model=None)
async def decide_in_chat(
    chat_id: str, tool_use_id: str, body: DecisionIn, request: Request, client: deps.ClientDep
) -> dict[str, Any]:
    """`{"id", "tool_use_id", "decision"}`: the decision that stands (deciding twice keeps the first)."""
    return await _decide(client, request, "chat", chat_id, tool_use_id, body)


@router.post("/runs/{run_id}/approvals/{tool_use_id}", response_model=None)
async def decide_in_run(
    run_id: str, tool_use_id: str, body: DecisionIn, request: Request, client: deps.ClientDep
) -> dict[str, Any]:
    await client.run_status(run_id)  # 404 for an unknown run
    return await _decide(client, request, "run", run_id, tool_use_id, body)


async def _decide(
    client: AsyncClient, request: Request, kind: Literal["chat", "run"], ident: str, tool_use_id: str, body: DecisionIn
) -> dict[str, Any]:
    """`by`, who decided, is the app's `user(request)` when it gave one, else the body's; the client checks it
    (a name on one line, at most 200 characters; else 422)."""
    by = await access.who(request, body.by)
    if body.approve:
        return await client.approve(ident, tool_use_id, by=by, kind=kind)
    return await client.deny(ident, tool_use_id, reason=body.reason, by=by, kind=kind)
