"""POST /api/{chats|runs}/{id}/approvals/{tool_use_id}: a person approves or denies a waiting tool call."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter

from web import deps
from web.bodies import DecisionIn
from web.ids import check_id

router = APIRouter(prefix="/api")


@router.post("/{kind}/{ident}/approvals/{tool_use_id}", response_model=None)
async def decide(
    kind: Literal["chats", "runs"],
    ident: str,
    tool_use_id: str,
    body: DecisionIn,
    client: deps.ClientDep,
) -> dict[str, Any]:
    """`{"id", "tool_use_id", "decision"}`: the decision that stands (deciding twice keeps the first). `by`,
    who decided, is checked by the client (a name on one line, at most 200 characters; else 422)."""
    check_id(ident, "chat_id" if kind == "chats" else "run_id")
    check_id(tool_use_id, "tool_use_id")
    which: Literal["chat", "run"] = "chat" if kind == "chats" else "run"
    if which == "run":
        await client.run_status(ident)  # 404 for an unknown run
    if body.approve:
        return await client.approve(ident, tool_use_id, by=body.by, kind=which)
    return await client.deny(ident, tool_use_id, reason=body.reason, by=body.by, kind=which)
