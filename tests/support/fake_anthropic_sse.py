"""Pure helpers for the Anthropic Messages API wire format, used by ``fake_anthropic``.

Kept apart from the server so the byte-level format (SSE framing, chunked transfer coding, error
bodies) and the request validation rules can be read and checked on their own, without sockets or threads.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

from .fake_files import file_problem

# Status -> `error.type`, as the real API names them (https://docs.anthropic.com/en/api/errors).
_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def new_id(prefix: str) -> str:
    """A random id shaped like the API's (``msg_…``, ``toolu_…``, ``req_…``); unique per call."""
    return f"{prefix}_{secrets.token_hex(12)}"


def error_type_for_status(status: int) -> str:
    """The `error.type` the real API uses for `status`, so SDK error classes and `.type` match."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, message: str) -> dict[str, Any]:
    """The JSON body of an error response (``{"type": "error", "error": {...}}``)."""
    return {"type": "error", "error": {"type": error_type_for_status(status), "message": message}}


def normalize_content(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy `content`, giving every tool_use block an id (fresh ``toolu_<hex>`` if absent).

    Done per delivery rather than once per Reply, so a Reply reused for many requests still hands each
    conversation distinct tool ids, as the real API would.
    """
    out: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "tool_use":
            out.append(
                {
                    "type": "tool_use",
                    "id": block.get("id") or new_id("toolu"),
                    "name": block["name"],
                    "input": block.get("input", {}),
                }
            )
        elif block.get("type") == "text":
            out.append({"type": "text", "text": block.get("text", "")})
        else:
            out.append(dict(block))
    return out


def default_stop_reason(content: list[dict[str, Any]]) -> str:
    """``tool_use`` when the reply calls a tool (the client must answer it), else ``end_turn``."""
    return "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"


def message_json(
    msg_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str | None,
    input_tokens: int,
    output_tokens: int,
    cache: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The whole Message object, as returned for ``"stream": false``; `cache` adds the cache usage fields."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **(cache or {})},
    }


def split_chunks(s: str, parts: int = 3) -> list[str]:
    """Split `s` into up to `parts` non-empty pieces, so clients really have to accumulate deltas."""
    if not s:
        return []
    size = max(1, -(-len(s) // parts))
    return [s[i : i + size] for i in range(0, len(s), size)]


def stream_events(
    msg_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    input_tokens: int,
    output_tokens: int,
    *,
    parts: int = 3,
    cache: Mapping[str, int] | None = None,
    bound: str | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The ordered (event type, data) pairs of a streamed Message, in the order the real API sends them. `bound`: the
    prefix a model with preserved thinking binds the reply's thinking to (`prefix_binding`), carried in the signature.

    Event 1 is ``message_start``; a ``ping`` follows it (the real API sends one early, and clients must
    skip it). Fault positions (``Fault.after_events``) count positions in this list.
    """
    start = message_json(msg_id, model, [], None, input_tokens, 1, cache)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(content):
        if block.get("type") == "tool_use":
            head: dict[str, Any] = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in ["", *split_chunks(json.dumps(block["input"]))]
            ]
        elif block.get("type") == "text":
            head = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in split_chunks(block["text"], parts)]
        elif block.get("type") == "thinking":
            # As the API streams it: the text in deltas, then the signature in one delta just before the stop.
            head = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in split_chunks(block["thinking"], parts)]
            deltas.append({"type": "signature_delta", "signature": sign(block["thinking"], bound)})
        else:  # anything else (e.g. redacted thinking) is sent whole in its start event
            head, deltas = block, []
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": head}))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens, **thinking_usage(content)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


# The fake's own key for thinking signatures: a block comes back valid only with the very text it was sent with.
_SIGNING_KEY = b"fake-anthropic-thinking"


def sign(thinking: str, bound: str | None = None) -> str:
    """The signature the fake gives a thinking block (and checks when the block comes back); on a model with preserved
    thinking it also carries the prefix the block was produced after (`bound`)."""
    base = "sig-" + hashlib.sha256(_SIGNING_KEY + thinking.encode("utf-8")).hexdigest()[:32]
    return f"{base}.{bound}" if bound else base


# Models that bind each thinking block to its prefix ("preserved thinking", from Claude Fable 5.1): a block whose
# prefix (system, tools, earlier messages; cache marks aside) changed is a 400, or dropped with `drop_block`.
PRESERVED_THINKING = ("claude-fable-5-1", "claude-fable-5-2", "claude-mythos-5-1", "claude-mythos-5-2",
                      "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")  # fmt: skip
BINDING_BETA = "thinking-binding-controls-2026-08-01"


def binds(model: Any) -> bool:
    """Whether `model` binds thinking blocks to their prefix."""
    return isinstance(model, str) and model.startswith(PRESERVED_THINKING)


def prefix_binding(body: Mapping[str, Any], upto: int) -> str:
    """The fake's own digest of a request's prefix before message `upto`: system (a string read as one text block),
    tools and those messages, cache marks left out (they are not part of what a block is bound to)."""
    system = body.get("system")
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    prefix = {"system": system, "tools": body.get("tools") or [], "messages": list(body.get("messages") or [])[:upto]}
    return hashlib.sha256(json.dumps(_unmarked(prefix), sort_keys=True).encode()).hexdigest()[:20]


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def thinking_usage(content: list[dict[str, Any]]) -> dict[str, Any]:
    """`output_tokens_details` of a reply that thought (a token per 4 characters of its thinking), else nothing."""
    chars = sum(len(b.get("thinking", "")) for b in content if b.get("type") == "thinking")
    return {"output_tokens_details": {"thinking_tokens": max(1, chars // 4)}} if chars else {}


def thinking_problem(body: Mapping[str, Any], betas: str = "") -> str | None:
    """The 400 the real API gives a request whose reasoning is not what the model produced: a thinking block whose
    text or signature changed anywhere; on a model with preserved thinking, a block whose prefix changed (unless the
    request asks, with the beta, to drop such blocks); with thinking on, a tool loop whose assistant turn lost its
    thinking."""
    messages = body.get("messages") or []
    drop = ((body.get("thinking") or {}).get("block_binding") or {}).get("prefix_mismatch_behavior") == "drop_block"
    if drop and BINDING_BETA not in betas:
        return f"thinking.block_binding: this field requires the `anthropic-beta: {BINDING_BETA}` header"
    dropped: set[tuple[int, int]] = set()
    for i, m in enumerate(messages):
        for j, b in enumerate(_blocks(m)):
            if b.get("type") != "thinking":
                continue
            base, _, bound = str(b.get("signature", "")).partition(".")
            if base != sign(str(b.get("thinking", ""))):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            if bound and binds(body.get("model")) and bound != prefix_binding(body, i):
                if not drop:
                    return (
                        f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a "
                        "different conversation. Remove the block, or set "
                        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
                    )
                dropped.add((i, j))
    on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    if on and last is not None and last == len(messages) - 2 and (last, 0) not in dropped:
        blocks = _blocks(messages[last])
        looping = any(b.get("type") == "tool_use" for b in blocks)
        if looping and blocks and blocks[0].get("type") not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must start "
                "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
            )
    return None


def encode_event(event: str, data: dict[str, Any]) -> bytes:
    """One SSE event: ``event: <type>\\ndata: <json>\\n\\n``."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def overloaded_event() -> bytes:
    """The in-stream error event the API sends when it is overloaded after the stream began."""
    return encode_event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def chunk(data: bytes) -> bytes:
    """Frame `data` as one HTTP/1.1 chunk.

    The stream uses chunked transfer coding (as the real API does) rather than a close-delimited body:
    with a close-delimited body a dropped socket looks exactly like a normal end of body, and the SDK
    silently returns a truncated message (stop_reason None) instead of raising.
    """
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def first_user_text(body: Mapping[str, Any]) -> str:
    """Text of the first message if it is a user message (string content or its text blocks)."""
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        return ""
    content = messages[0].get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def sniff_image(data: bytes) -> str | None:
    """The image type the bytes are (magic numbers), as the API reads them; None for no image it takes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_blocks(body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path, block) of every image a request carries, in order: a message's own, and those inside its tool
    results' content lists."""
    out: list[tuple[str, dict[str, Any]]] = []
    for i, m in enumerate(body.get("messages") or []):
        for j, b in enumerate(_blocks(m)):
            if b.get("type") == "image":
                out.append((f"messages.{i}.content.{j}", b))
            elif b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                out += [(f"messages.{i}.content.{j}.content.{k}", p) for k, p in enumerate(b["content"])
                        if isinstance(p, dict) and p.get("type") == "image"]
    return out


def images_of(body: Mapping[str, Any]) -> list[str]:
    """The SHA-256 of each image's decoded bytes, in the order the request carries them: what a test compares
    with the bytes a tool returned."""
    out = []
    for _, block in image_blocks(body):
        data = (block.get("source") or {}).get("data", "")
        out.append(hashlib.sha256(base64.b64decode(data)).hexdigest())
    return out


def image_problem(body: Mapping[str, Any]) -> str | None:
    """The 400 the API gives an image it cannot take: a type it does not take, bytes that are not base64, or bytes
    of another type than the one declared."""
    for path, block in image_blocks(body):
        source = block.get("source") or {}
        if source.get("type") != "base64":
            return f"{path}.source: only base64 sources are served by this fake"
        declared = source.get("media_type")
        if declared not in IMAGE_TYPES:
            return f"{path}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or " \
                "'image/webp'"
        try:
            data = base64.b64decode(str(source.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            return f"{path}.source.base64.data: invalid base64 data"
        if sniff_image(data) != declared:
            return f"{path}.source.base64: Image does not match the provided media type {declared}"
    return None


def validate_request(body: Mapping[str, Any], enforce_tool_pairing: bool = True, betas: str = "") -> str | None:
    """The 400 message the real API would give this body, or None if it is acceptable.

    Pairing matters most: a worker that retries a turn and re-appends a tool_use, or loses a tool_result,
    produces exactly these histories, and the real API rejects them forever after.
    """
    for name in ("model", "max_tokens"):
        if name not in body:
            return f"{name}: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if m.get("content") in (None, "", []) and not (i == len(messages) - 1 and m["role"] == "assistant"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
    if messages[0]["role"] != "user":
        return 'messages.0.role: the first message must use the "user" role'
    problem = image_problem(body)
    if problem is not None:
        return problem
    if not enforce_tool_pairing:
        return None
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            ids = [b.get("id") for b in _blocks(m) if b.get("type") == "tool_use"]
            nxt = messages[i + 1] if i + 1 < len(messages) and messages[i + 1]["role"] == "user" else None
            answered = {b.get("tool_use_id") for b in _blocks(nxt) if b.get("type") == "tool_result"}
            missing = [str(x) for x in ids if x not in answered]
            if missing:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
        else:
            prev = messages[i - 1] if i > 0 and messages[i - 1]["role"] == "assistant" else None
            used = {b.get("id") for b in _blocks(prev) if b.get("type") == "tool_use"}
            for j, b in enumerate(_blocks(m)):
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in used:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
    problem = thinking_problem(body, betas) or file_problem(body)
    if problem is not None:
        return problem
    if not body.get("tools") and any(
        b.get("type") in ("tool_use", "tool_result") for m in messages for b in _blocks(m)
    ):
        # The real API's words: a history with tool calls needs a request that defines tools (an agent that had
        # tools and has none now must tell its old calls another way).
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None
