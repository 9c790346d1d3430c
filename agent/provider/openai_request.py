"""Baton's neutral request as a Chat Completions body: a pure function, so a replay sends the same bytes.

- the system prompt (a string or text blocks) is the first message, `role: system`;
- an assistant message's text blocks are its `content` (None when it only calls tools), its `tool_use` blocks
  its `tool_calls` (`{id, type: function, function: {name, arguments}}`, the arguments as compact JSON);
- a user message's `tool_result` blocks become one `tool` message each, with its `tool_call_id`, in order and
  right after the assistant message (the API's pairing rule; Baton's history repair already answers every
  `tool_use`, placeholders included); its text, if any, follows as a `user` message;
- a user's files go as content parts (an image as an `image_url` part with a data URL, a PDF as a `file` part);
  a tool message takes text only, so the images of a round's results follow its tool messages in one `user`
  message, each result's images after a line naming its call;
- a result with `is_error` has no flag to go in: its content is sent prefixed with `ERROR_PREFIX`, so the
  model still reads that the call failed;
- tools are `{"type": "function", "function": {name, description, parameters}}`;
- `cache_control` marks are dropped: OpenAI caches prompt prefixes by itself, and reports what it read.
"""

from __future__ import annotations

import json
from typing import Any

from agent.provider.base import ProviderRequest

ERROR_PREFIX = "[tool error] "


def _text_of(content: Any) -> str:
    """A block list's (or a string's) text, blocks other than text left out."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def arguments_json(tool_input: Any) -> str:
    """A call's input as the API carries it: a JSON string (compact, keys in the order recorded)."""
    return json.dumps(tool_input, ensure_ascii=False, separators=(",", ":"))


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    blocks = _blocks(message)
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": arguments_json(b.get("input") or {})},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    # A compatible server's reasoning goes back as it asks for it (DeepSeek requires it on a turn that made tool
    # calls); only this model's own, unsigned reasoning reaches here (a signed block is Anthropic's).
    reasoning = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking" and not b.get("signature"))
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def media_part(block: dict[str, Any]) -> dict[str, Any] | None:
    """A Messages API image or document block (a base64 source) as a Chat Completions content part."""
    source = block.get("source") or {}
    if source.get("type") != "base64":
        return None
    url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    if block.get("type") == "image":
        return {"type": "image_url", "image_url": {"url": url}}
    if block.get("type") == "document":
        return {"type": "file", "file": {"filename": block.get("title") or "document.pdf", "file_data": url}}
    return None


def _result_media(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The images of a tool result (its content list's media), led by a line naming the call they answer."""
    content = block.get("content")
    blocks = content if isinstance(content, list) else []
    parts = [p for b in blocks if isinstance(b, dict) and (p := media_part(b)) is not None]
    if not parts:
        return []
    return [{"type": "text", "text": f"[images from tool call {block['tool_use_id']}]"}, *parts]


def _user(message: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in _blocks(message):
        kind = block.get("type")
        if kind == "tool_result":
            content = _text_of(block.get("content"))
            if block.get("is_error"):
                content = ERROR_PREFIX + content
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content})
            parts.extend(_result_media(block))
        elif kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind in ("image", "document") and (part := media_part(block)) is not None:
            parts.append(part)
    if parts and all(p["type"] == "text" for p in parts):
        # Text only: one string, as every request before files was sent (a replay's bytes do not change).
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def chat_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """The request's `messages`: system first, then each of Baton's messages in the API's shape."""
    out: list[dict[str, Any]] = []
    system = _text_of(request.system)
    if system:
        out.append({"role": "system", "content": system})
    for message in request.messages:
        if message.get("role") == "assistant":
            out.append(_assistant(message))
        else:
            out.extend(_user(message))
    return out


def chat_tools(request: ProviderRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description", ""),
                "parameters": spec.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for spec in request.tools
    ]


def chat_body(request: ProviderRequest) -> dict[str, Any]:
    """The whole streaming Chat Completions body."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request),
        # `max_tokens` is refused by OpenAI's reasoning models; the compatible servers take this name too.
        "max_completion_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},  # the last chunk then carries the usage
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if isinstance(request.thinking, str):  # a number of tokens is refused when the agent is loaded
        body["reasoning_effort"] = request.thinking
    tools = chat_tools(request)
    if tools:
        body["tools"] = tools
    return body


def unpaired_calls(messages: list[dict[str, Any]]) -> list[str]:
    """The API's pairing rule, as a check: every `tool_calls` id answered by a `tool` message that follows its
    assistant message before any other kind; returns the ids that are not (empty when the request pairs)."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        answered: set[str] = set()
        for follower in messages[i + 1 :]:
            if follower.get("role") != "tool":
                break
            answered.add(follower.get("tool_call_id", ""))
        missing += [c["id"] for c in message["tool_calls"] if c["id"] not in answered]
    return missing
