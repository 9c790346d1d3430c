"""Prompt-cache breakpoints: where `cache_control` goes on a request, as a pure function of that request.

The API caches a prompt in the order tools -> system -> messages, up to each block marked with
`cache_control` (at most 4 marks per request); a mark also finds an earlier cached prefix up to about 20
blocks before it. Baton marks, on every request:

1. the tools + system prefix: the last system block, or the last tool when there is no system prompt;
   every request of a chat or run shares it;
2. the last block of the previous request (the last user message before the last assistant message): the
   prefix the previous step wrote, which this one reads however many blocks the last round added;
3. the last block of this request: written now, and read by the next step, by a replay of this very attempt
   and by a resume that rebuilds the same request from a stored round.

The fourth mark stays free. Since the request is a function of the journal alone, the marks land on the
same bytes on every replay, and each replay reads what the attempt before it wrote.
"""

from __future__ import annotations

from typing import Any

CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}  # the 5-minute cache: written at 1.25x, read at 0.1x
MAX_BREAKPOINTS = 4


def system_blocks(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The system prompt as text blocks (the form that can carry `cache_control`)."""
    if system is None or system == "" or system == []:
        return None
    if isinstance(system, str):
        return [{"type": "text", "text": system}]
    return [dict(b) for b in system]


def _mark(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": dict(CACHE_CONTROL)}


def _markable(block: Any) -> bool:
    # The API refuses cache_control on an empty text block, and on a thinking block (which must come back unchanged).
    return (
        isinstance(block, dict)
        and not (block.get("type") == "text" and not block.get("text"))
        and block.get("type") not in ("thinking", "redacted_thinking")
    )


def message_breakpoints(messages: list[dict[str, Any]]) -> list[int]:
    """Indexes of the messages whose last block is marked: the previous request's last, then this one's."""
    if not messages:
        return []
    last = len(messages) - 1
    marks: list[int] = []
    assistant = next((i for i in range(last, -1, -1) if messages[i].get("role") == "assistant"), None)
    if assistant is not None:
        previous = next((i for i in range(assistant - 1, -1, -1) if messages[i].get("role") == "user"), None)
        if previous is not None:
            marks.append(previous)
    if last not in marks:
        marks.append(last)
    return marks


def with_breakpoints(
    tools: list[dict[str, Any]], system: str | list[dict[str, Any]] | None, messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Copies of (tools, system, messages) carrying the marks described above; the inputs stay unmarked."""
    out_tools = list(tools)
    out_system = system_blocks(system)
    if out_system:
        out_system[-1] = _mark(out_system[-1])
    elif out_tools:
        out_tools[-1] = _mark(out_tools[-1])
    out_messages = list(messages)
    for index in message_breakpoints(messages):
        content = messages[index].get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        if not isinstance(content, list) or not content or not _markable(content[-1]):
            continue
        out_messages[index] = {**messages[index], "content": [*content[:-1], _mark(content[-1])]}
    return out_tools, out_system, out_messages


def count_breakpoints(tools: list[dict[str, Any]], system: Any, messages: list[dict[str, Any]]) -> int:
    """How many blocks of a request carry `cache_control` (the API allows at most 4)."""
    blocks: list[Any] = [*tools, *(system if isinstance(system, list) else [])]
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            blocks += content
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)
