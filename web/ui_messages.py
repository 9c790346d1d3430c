"""A chat's history as the AI SDK's `UIMessage` list (what `useChat({messages})` takes): a pure fold.

There is one mapping from Baton's records to what a `useChat` page shows, web/ui_chunks.py's `advance`; this
module only feeds it and reads its output:

- a settled turn's transcript messages become the stream items its stream carried (`text.delta` per text block,
  `reasoning.delta` per thinking block with text, `tool.called` per call, `tool.result` per result, `notice` per
  notice) and go through `advance`;
- an unfinished turn's own stream items (read by the route, as a resume reads them) go through it as they are;
- the chunks are assembled into a message as the SDK's `processUIMessageStream` assembles them (`assemble`).

So the history's assistant message of a turn is the message its stream builds, under the same id (`start`'s
`messageId`, `first_message_id`): a page that loads the history and then resumes the running turn
(`useChat({resume: true})`) gets that message replaced by the replay, not a second copy of it.

File parts: when ui_chunks emits `file` chunks, `assemble` gains their case (marked below) and `transcript_items`
the blocks they come from; nothing else changes. (A thinking block whose text the API left out, `display:
"omitted"`, and a redacted one have no words to show: no part, as their stream streamed none.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.messages import Message, NoticeBlock, TextBlock, ThinkingBlock, ToolUseBlock, result_text
from agent.messages.media import DocumentBlock, FileBlock, ImageBlock
from web.ui_chunks import Chunk, TurnChunks, advance, opening, parked, settled

UIMessage = dict[str, Any]
Item = dict[str, Any]


@dataclass
class Turn:
    """One turn of the history: the user's words and the items its assistant message is folded from."""

    turn_id: str
    text: str | None = None
    files: tuple[FileBlock, ...] = ()  # the files the user's message carries (served by the chat's files route)
    items: list[Item] = field(default_factory=list)
    parked: bool = False  # waiting for a person's approval: its stream ended there
    running: bool = False  # its items are its stream's so far (else the transcript's, of a settled turn)


def user_message(turn_id: str, text: str, files: Iterable[FileBlock] = (), chat_id: str = "") -> UIMessage:
    """The user's message of a turn (Baton stores the text; its id is the turn's, stable across reads), its files
    as the SDK's file parts, each pointing at `GET /api/chats/{chat_id}/files/{sha256}`."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for f in files:
        part = {"type": "file", "mediaType": f.media_type, "url": f"/api/chats/{chat_id}/files/{f.sha256}"}
        parts.append({**part, "filename": f.name} if f.name else part)
    return {"id": f"{turn_id}:user", "role": "user", "parts": parts}


def user_files(message: Message) -> tuple[FileBlock, ...]:
    return tuple(b for b in message.content if isinstance(b, ImageBlock | DocumentBlock))


def user_words(message: Message) -> str | None:
    """The text a person sent, if `message` is one (a user message carrying tool results is the model's round)."""
    if message.role != "user" or message.tool_results:
        return None
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


def transcript_items(turn_id: str, messages: Iterable[Message]) -> list[Item]:
    """The stream items a settled turn's transcript messages stand for, in order (its live text is gone by now:
    the transcript is the record, and the text of its kept attempts is exactly the assistant messages')."""
    out: list[Item] = []
    for n, message in enumerate(messages):
        if message.role == "assistant":
            # An assistant message without an id comes from before ids were written: one of its own.
            step = message.message_id or f"{turn_id}:h{n}"
            for block in message.content:
                if isinstance(block, TextBlock | ThinkingBlock) and (words := _words(block)):
                    kind = "text.delta" if isinstance(block, TextBlock) else "reasoning.delta"
                    out.append({"type": kind, "turn_id": turn_id, "message_id": step, "attempt": 0, "text": words})
                elif isinstance(block, ToolUseBlock):
                    out.append({"type": "tool.called", "turn_id": turn_id, "message_id": step,
                                "tool_use_id": block.id, "name": block.name, "input": block.input})  # fmt: skip
        elif message.role == "user":
            for result in message.tool_results:
                out.append({"type": "tool.result", "turn_id": turn_id, "tool_use_id": result.tool_use_id,
                            "is_error": result.is_error, "content": result_text(result.content)})  # fmt: skip
        else:
            for block in message.content:
                if isinstance(block, NoticeBlock):
                    out.append({"type": "notice", "turn_id": turn_id, "kind": block.kind, "text": block.text})
    return out


def _words(block: TextBlock | ThinkingBlock) -> str:
    return block.text if isinstance(block, TextBlock) else block.thinking


def turns_of(transcript: list[Message], unfinished: Iterable[str]) -> list[Turn]:
    """The transcript's turns in order, each with its user's words and, when settled, its items.

    An unfinished turn gets only its words here (its items are its stream's, which the caller adds). A message
    with no turn id (an old notice) belongs to the turn before it."""
    running = set(unfinished)
    turns: dict[str, Turn] = {}
    own: dict[str, list[Message]] = {}
    current: str | None = None
    for message in transcript:
        turn_id = message.turn_id or current
        if turn_id is None:
            continue
        current = turn_id
        turn = turns.setdefault(turn_id, Turn(turn_id))
        words = user_words(message)
        if words is not None and turn.text is None:
            turn.text, turn.files = words, user_files(message)
        elif words is None:
            own.setdefault(turn_id, []).append(message)
    for turn_id, turn in turns.items():
        if turn_id not in running:
            turn.items = transcript_items(turn_id, own.get(turn_id, []))
    return list(turns.values())


def history(turns: Iterable[Turn], chat_id: str = "") -> list[UIMessage]:
    """The `UIMessage` list of `turns` (of chat `chat_id`): each turn's user message, then its assistant message
    if it has parts."""
    out: list[UIMessage] = []
    for turn in turns:
        if turn.text is not None:
            out.append(user_message(turn.turn_id, turn.text, turn.files, chat_id))
        message = assemble(turn_chunks(turn))
        if message["parts"]:
            out.append(message)
    return out


def turn_chunks(turn: Turn) -> list[Chunk]:
    """The chunks the turn's stream carries for these items (`advance`, as the live stream runs it)."""
    state = TurnChunks(turn.turn_id)
    out = [opening(state)]
    for item in turn.items:
        state, more = advance(state, item)
        out += more
    if turn.parked:
        state, more = parked(state)
        out += more
    elif not turn.running:
        state, more = settled(state)
        out += more
    return out


def assemble(chunks: Iterable[Chunk]) -> UIMessage:
    """The assistant message the SDK's `processUIMessageStream` builds from these chunks (`ai` 7.x), for the
    chunk types ui_chunks emits."""
    message: UIMessage = {"id": "", "role": "assistant", "parts": []}
    parts: list[dict[str, Any]] = message["parts"]
    texts: dict[str, dict[str, Any]] = {}  # open text parts by chunk id
    thoughts: dict[str, dict[str, Any]] = {}  # open reasoning parts by chunk id

    def call(ident: str) -> dict[str, Any]:
        return next(p for p in parts if p.get("toolCallId") == ident)

    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start" and chunk.get("messageId"):
            message["id"] = chunk["messageId"]
        elif kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "text-start":
            texts[chunk["id"]] = {"type": "text", "text": "", "state": "streaming"}
            parts.append(texts[chunk["id"]])
        elif kind == "text-delta":
            texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind == "text-end":
            texts.pop(chunk["id"])["state"] = "done"
        elif kind == "reasoning-start":  # the SDK's reasoning part keeps its chunk id
            thoughts[chunk["id"]] = {"type": "reasoning", "id": chunk["id"], "text": "", "state": "streaming"}
            parts.append(thoughts[chunk["id"]])
        elif kind == "reasoning-delta":
            thoughts[chunk["id"]]["text"] += chunk["delta"]
        elif kind == "reasoning-end":
            thoughts.pop(chunk["id"])["state"] = "done"
        # (file: its part goes here, as text's does)
        elif kind == "tool-input-available":
            parts.append({"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"],
                          "state": "input-available", "input": chunk["input"]})  # fmt: skip
        elif kind == "tool-approval-request":
            call(chunk["toolCallId"]).update(state="approval-requested", approval={"id": chunk["approvalId"]})
        elif kind == "tool-approval-response":
            part = next(p for p in parts if p.get("approval", {}).get("id") == chunk["approvalId"])
            approval = {**part["approval"], "approved": chunk["approved"]}
            if chunk.get("reason") is not None:
                approval["reason"] = chunk["reason"]
            part.update(state="approval-responded", approval=approval)
        elif kind == "tool-output-available":
            call(chunk["toolCallId"]).update(state="output-available", output=chunk["output"])
        elif kind == "tool-output-error":
            call(chunk["toolCallId"]).update(state="output-error", errorText=chunk["errorText"])
        elif kind == "reset-step":  # the open step's parts go; its step-start stays
            starts = [n for n, p in enumerate(parts) if p["type"] == "step-start"]
            del parts[(starts[-1] + 1 if starts else 0) :]
            texts.clear()
            thoughts.clear()
        # finish-step, finish, error: no part (an error is the client's `onError`; its notice is a text part)
    return message

