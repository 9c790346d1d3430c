"""POST /api/{chats|runs}/{id}/approvals/{tool_use_id}: a person approves or denies a waiting tool call."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from web import deps
from web.bodies import DecisionIn
from web.ids import check_id

router = APIRouter(prefix="/api")


@router.post("/{kind}/{ident}/approvals/{tool_use_id}", response_model=None)
def decide(
    kind: Literal["chats", "runs"],
    ident: str,
    tool_use_id: str,
    body: DecisionIn,
    client: deps.ClientDep,
) -> dict[str, Any] | JSONResponse:
    """`{"id", "tool_use_id", "decision"}`; 501 while the client has no approvals (issue #14)."""
    check_id(ident, "chat_id" if kind == "chats" else "run_id")
    check_id(tool_use_id, "tool_use_id")
    if kind == "runs":
        client.run_status(ident)  # 404 for an unknown run
    if not hasattr(client, "approve") or not hasattr(client, "deny"):
        return JSONResponse({"detail": "approvals are not available yet"}, status_code=501)
    if body.approve:
        client.approve(ident, tool_use_id)
    else:
        client.deny(ident, tool_use_id, reason=body.reason)
    return {"id": ident, "tool_use_id": tool_use_id, "decision": "approved" if body.approve else "denied"}
