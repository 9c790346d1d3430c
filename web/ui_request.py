"""What a `useChat` request asks for: the body `DefaultChatTransport` posts, read as one of Baton's operations.

`{"id", "messages", "trigger", "messageId"}` (plus whatever the app's `body` option adds): `submit-message`
with a user message last is a new message (its text parts); with an assistant message last whose tool parts
carry approval responses (`addToolApprovalResponse`) it is those decisions; `regenerate-message` is a retry.
The client's earlier messages are not read: Baton keeps the history, and a client's copy is not trusted as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.client.attachments import Attachment


class ChatIn(BaseModel):
    """The transport's body; extra keys (an app's own `body` option) are allowed and ignored, but `on_busy`,
    `agent` and `model`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    messages: list[dict[str, Any]] = []
    trigger: str = "submit-message"
    messageId: str | None = None  # the transport's field name
    on_busy: str = "enqueue"
    # An app's model picker adds these through the transport's `body` option; the client checks them.
    agent: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class Send:
    text: str
    files: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class Regenerate:
    pass


@dataclass(frozen=True)
class Decision:
    tool_use_id: str
    approved: bool
    reason: str | None = None


@dataclass(frozen=True)
class Decide:
    decisions: tuple[Decision, ...]


Asked = Send | Regenerate | Decide


def asked(trigger: str, messages: list[dict[str, Any]]) -> Asked:
    """The operation a request asks for; ValueError (a 422) saying why when it asks for none."""
    if trigger == "regenerate-message":
        return Regenerate()
    if trigger != "submit-message":
        raise ValueError(f"trigger must be 'submit-message' or 'regenerate-message'; got {trigger!r}")
    if not messages or not isinstance(messages[-1], dict):
        raise ValueError("messages must end with the message to send")
    last = messages[-1]
    parts = [p for p in last.get("parts") or [] if isinstance(p, dict)]
    if last.get("role") == "user":
        text = "\n\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
        if not text.strip():
            raise ValueError("the last user message has no text part")
        return Send(text, tuple(attachment(p) for p in parts if p.get("type") == "file"))
    if last.get("role") == "assistant":
        decisions = tuple(d for d in (_decision(p) for p in parts) if d is not None)
        if decisions:
            return Decide(decisions)
        raise ValueError("the last message is the assistant's, with no tool approval response to send")
    raise ValueError(f"the last message's role must be 'user' or 'assistant'; got {last.get('role')!r}")


def attachment(part: dict[str, Any]) -> Attachment:
    """A file part (`{"type": "file", "mediaType", "url": "data:...;base64,...", "filename"}`, what
    `sendMessage({text, files})` posts) as an `Attachment`; its type and size are checked by the client."""
    url, media_type, name = part.get("url"), part.get("mediaType"), part.get("filename")
    head, comma, data = url.partition(",") if isinstance(url, str) else ("", "", "")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        raise ValueError("a file part's url must be a base64 data URL (data:TYPE;base64,...)")
    declared = media_type if isinstance(media_type, str) and media_type else head[5:].removesuffix(";base64")
    return Attachment.from_base64(data, declared, name if isinstance(name, str) else None)


def _decision(part: dict[str, Any]) -> Decision | None:
    """A tool part (`tool-NAME` or `dynamic-tool`) the person answered: state `approval-responded`."""
    kind = str(part.get("type", ""))
    if not (kind.startswith("tool-") or kind == "dynamic-tool") or part.get("state") != "approval-responded":
        return None
    approval = part.get("approval") or {}
    if not isinstance(approval, dict) or not isinstance(approval.get("approved"), bool):
        return None
    reason = approval.get("reason")
    # The approval id Baton sends is the call's id; the part's own call id is the one to decide.
    return Decision(str(part.get("toolCallId") or approval.get("id")), approval["approved"], reason or None)
