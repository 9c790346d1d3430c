"""Request bodies. Types are checked here (strictly: no "5" for 5); content (empty text, bad ids, a
workspace that does not exist) is checked by the client, so its messages are the ones a caller sees."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class FileIn(_Body):
    media_type: str  # must agree with the type the bytes say they are (checked by the client)
    data: str  # base64
    name: str | None = None


class MessageIn(_Body):
    text: str
    files: list[FileIn] = []
    on_busy: str = "enqueue"  # checked by the client (enqueue, interrupt or reject), so its message is the one seen
    agent: str | None = None  # checked by the client against what the workers publish
    model: str | None = None


class RunIn(_Body):
    goal: str
    workspace: str
    run_id: str | None = None
    agent: str | None = None
    model: str | None = None


class DecisionIn(_Body):
    approve: bool
    reason: str | None = None
    by: str | None = None  # who decided, as the caller names them (shown in the timeline)
