"""Messages as the GenAI conventions record them (`gen_ai.input.messages` and the rest): JSON of roles and parts.

Built only when content capture is on. Baton's messages are in the Messages API's shape (text, `tool_use` and
`tool_result` blocks); the conventions' parts are `text`, `tool_call` and `tool_call_response`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.provider.base import Answer

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def capture_content(env: Mapping[str, str]) -> bool:
    """Message text, tool inputs and results go into spans only when this says so."""
    return env.get(CAPTURE_CONTENT, "").strip().lower() == "true"



def _part(block: Any) -> dict[str, Any]:
    if isinstance(block, str):
        return {"type": "text", "content": block}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "content": block.get("text", "")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": block.get("id"), "name": block.get("name"), "arguments": block.get("input")}
    if kind == "tool_result":
        response = _response(block.get("content"))
        return {"type": "tool_call_response", "id": block.get("tool_use_id"), "response": response}
    return {"type": str(kind)}


def _response(content: Any) -> Any:
    """A result's content: its text, or its parts with each image named by type (its bytes are no span's)."""
    if not isinstance(content, list):
        return content
    return [_part(b) if isinstance(b, dict) and b.get("type") != "image" else {"type": "image"} for b in content]


def parts(content: Any) -> list[dict[str, Any]]:
    """A message's content (a string or blocks) as the conventions' parts."""
    if isinstance(content, str):
        return [_part(content)]
    return [_part(block) for block in content or []]


def input_messages(messages: list[dict[str, Any]]) -> str:
    return json.dumps([{"role": m.get("role"), "parts": parts(m.get("content"))} for m in messages],
                      ensure_ascii=False)


def system_instructions(system: str | list[dict[str, Any]]) -> str:
    return json.dumps(parts(system), ensure_ascii=False)


def output_messages(answer: Answer) -> str:
    blocks = [block.model_dump() for block in answer.content]
    message = {"role": "assistant", "parts": parts(blocks), "finish_reason": answer.stop_reason or ""}
    return json.dumps([message], ensure_ascii=False)
