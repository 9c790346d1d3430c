"""Message and content-block models: what the transcript stores and what the provider is sent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agent.messages.base import _Block
from agent.messages.media import DocumentBlock, FileBlock, FileSource, ImageBlock, media_to_api

INTERRUPTED_RESULT = "[Interrupted before result was recorded]"
RESUMED_NOTICE = "Continued from the tool results already fetched."
STOPPED_NOTICE = "Stopped by user."
INTERRUPTED_NOTICE = "Interrupted by a new message."
DENIED_RESULT = "Denied by user."
DENIED_WITH_REASON = "Denied by user: {reason}"
EXPIRED_RESULT = "Denied: approval expired."
DEPLOY_NOTICE = "Interrupted by a platform deploy; resuming (attempt {attempt} of {max_attempts})."


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ResultPart = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]
ToolContent = str | tuple[ResultPart, ...]
"""A tool's result: text (how every stored result of before images is kept), or text and images in order."""


class ToolResultBlock(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: ToolContent
    is_error: bool = False
    # Set when Baton wrote the result itself (an interrupted call), never by a tool.
    synthesized: bool = False


class ThinkingBlock(_Block):
    """What a model reasoned before it answered, kept exactly as produced: Anthropic's (with its `signature`, which
    the API verifies when the block comes back in a tool loop) or an OpenAI-compatible server's `reasoning_content`
    (no signature). Journaled with its step, so every replay sends the same bytes."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    # Baton's own: the digest of the request prefix the block was produced after (agent/history/binding.py); not sent.
    bound_to: str | None = None


class RedactedThinkingBlock(_Block):
    """Reasoning the provider encrypted (`data`), sent back as it came."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str
    bound_to: str | None = None  # as a thinking block's


class NoticeBlock(_Block):
    """A system notice for people (a resume, a stop, a deploy, an error); never sent to the model."""

    type: Literal["notice"] = "notice"
    kind: str
    text: str


Block = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | NoticeBlock | ImageBlock
    | DocumentBlock,
    Field(discriminator="type"),
]
# What a model's answer holds, in the order it produced it.
AnswerBlock = TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock
REASONING = (ThinkingBlock, RedactedThinkingBlock)
# The key under which to_api hands a reasoning block's `bound_to` to the request's binding check, which removes it
# (agent/history/binding.py): the wire never carries it.
BOUND = "_bound_to"
Role = Literal["user", "assistant", "notice"]


class Message(BaseModel):
    """One transcript entry. `turn_id` ties it to the chat turn or run step that wrote it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Role
    content: tuple[Block, ...]
    turn_id: str | None = None
    message_id: str | None = None  # an assistant message: the model step that produced it (its live text's id)
    model: str | None = None  # an assistant message: the model that wrote it (a chat may switch agent or model)

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResultBlock))

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock | NoticeBlock))


def user_text(text: str, turn_id: str | None = None, files: tuple[FileBlock, ...] = ()) -> Message:
    """A user's message: its text, then the files it carries (by reference: their bytes are in the store)."""
    return Message(role="user", content=(TextBlock(text=text), *files), turn_id=turn_id)


def stop_notice(reason: str | None) -> str:
    """The notice of a stopped unit: a user's stop, or an interrupt by a new message (`on_busy="interrupt"`)."""
    return INTERRUPTED_NOTICE if reason == "interrupt" else STOPPED_NOTICE


def notice(kind: str, text: str, turn_id: str | None = None) -> Message:
    return Message(role="notice", content=(NoticeBlock(kind=kind, text=text),), turn_id=turn_id)


_BLOCK: TypeAdapter[Block] = TypeAdapter(Block)


def load_message(raw: str | bytes | dict[str, Any]) -> Message | None:
    """Parse a stored message, dropping blocks this version does not understand; None if unreadable."""
    if isinstance(raw, str | bytes):
        # Nearly every stored message is one this version reads whole: parsing and validating it in one pass in
        # pydantic-core is ~3x cheaper than json.loads and a validation per block, and a chat turn reads every
        # message of its chat. Anything it refuses takes the tolerant path below.
        try:
            return Message.model_validate_json(raw)
        except ValidationError:
            pass
    try:
        data = json.loads(raw) if isinstance(raw, str | bytes) else raw
        if not isinstance(data, dict):  # valid JSON, but no message (a bare list, say): unreadable, not a crash
            return None
        blocks = []
        for block in data.get("content", ()):
            try:
                blocks.append(_BLOCK.validate_python(block))
            except ValidationError:
                continue
        return Message(
            role=data["role"], content=tuple(blocks), turn_id=data.get("turn_id"), message_id=data.get("message_id"),
            model=data.get("model"),
        )
    except (ValueError, KeyError, TypeError, ValidationError):
        return None


_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def load_messages(raw: Sequence[str | bytes]) -> list[Message]:
    """Stored messages parsed (an entry that is no message skipped), as `load_message` parses each. A history is
    parsed in one pass of pydantic-core when every entry is a message this version reads whole (nearly always):
    ~25 % less than one call an entry, at 1,000 messages a turn's ~1 ms. Anything else goes entry by entry."""
    if raw:
        entries = (r.encode() if isinstance(r, str) else r for r in raw)
        try:
            parsed = _MESSAGES.validate_json(b"[" + b",".join(entries) + b"]")
        except ValidationError:
            parsed = []
        if len(parsed) == len(raw):  # each entry one message (an entry of two would read as two: no shortcut then)
            return parsed
    return [m for m in (load_message(r) for r in raw) if m is not None]


def dump_message(message: Message) -> str:
    return message.model_dump_json()


def result_text(content: ToolContent) -> str:
    """A result's text, an image told as `[image NAME]`: what a display, a log or a text-only API shows of it."""
    if isinstance(content, str):
        return content
    return "\n".join(p.text if isinstance(p, TextBlock) else f"[image {p.name or p.sha256[:12]}]" for p in content)


def result_images(content: ToolContent) -> tuple[ImageBlock, ...]:
    return () if isinstance(content, str) else tuple(p for p in content if isinstance(p, ImageBlock))


def _content_to_api(content: ToolContent, files: FileSource | None) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [media_to_api(p, files) if isinstance(p, ImageBlock) else p.model_dump() for p in content]


def block_to_api(block: AnswerBlock | ToolResultBlock, files: FileSource | None = None) -> dict[str, Any]:
    """The Messages API form of a block (Baton-only fields removed); a result's images read from `files`."""
    if type(block) is TextBlock:  # most blocks of a history: its two fields, without pydantic's dump (~0.7 us)
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result", "tool_use_id": block.tool_use_id, "content": _content_to_api(block.content, files),
        }
        if block.is_error:
            out["is_error"] = True
        return out
    if isinstance(block, ThinkingBlock) and block.signature is None:
        return {"type": "thinking", "thinking": block.thinking}  # a compatible server's: nothing to verify
    out = block.model_dump(exclude={"bound_to"})
    if isinstance(block, REASONING) and block.bound_to is not None:
        out[BOUND] = block.bound_to
    return out


def to_api(
    messages: list[Message], model: str | None = None, files: FileSource | None = None
) -> list[dict[str, Any]]:
    """Model input: user and assistant messages only, notices left out, empty messages dropped. An assistant
    message's reasoning goes back only to the model that produced it (`model`; None: to any): another model, or
    another provider, cannot verify it (the transcript keeps it). File blocks take their bytes from `files`."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "notice":
            continue
        foreign = model is not None and message.model != model
        blocks = []
        for b in message.content:
            # By exact type (no block model is subclassed): a chat turn converts every earlier message of its chat,
            # and a check against a pydantic model's class goes through `ABCMeta`, ~0.15 us each, several a block.
            if type(b) is NoticeBlock or (foreign and type(b) in REASONING):
                continue
            if type(b) is ImageBlock or type(b) is DocumentBlock:
                blocks.append(media_to_api(b, files))
            else:
                blocks.append(block_to_api(cast(AnswerBlock | ToolResultBlock, b), files))  # no notice, no file
        if blocks:
            out.append({"role": message.role, "content": blocks})
    return out
