"""A provider request's body as Baton serializes it for the SDK's `post(content=...)`: the same JSON document the
SDK's own preparation and encoder make of it, text as UTF-8; a lone surrogate, which the SDK's encoder cannot send,
escaped."""

from __future__ import annotations

import json

import pytest
from anthropic._utils._json import openapi_dumps
from anthropic._utils._prepare import prepare_request_data

from agent.provider.transport import json_body


def _sdk(body: dict) -> bytes:
    """What the anthropic SDK sends for `post(body=...)`."""
    return openapi_dumps(prepare_request_data(body, location="body"))


BODY = {
    "model": "claude-x",
    "max_tokens": 1024,
    "stream": True,
    "system": [{"type": "text", "text": "Réponds en français.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "peek", "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is in 日本.txt?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "peek", "input": {"key": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": False}]},
    ],
}


def test_the_body_is_the_document_the_sdk_would_send_with_text_as_utf8() -> None:
    sent = json_body(BODY)
    assert json.loads(sent) == json.loads(_sdk(BODY)) == BODY
    assert "日本".encode() in sent  # not six-byte escapes: a chat in another script is not sent twice its size


def test_a_lone_surrogate_is_escaped_where_the_sdk_could_not_send_it() -> None:
    body = {**BODY, "messages": [{"role": "user", "content": "a file named \udce9.txt"}]}  # surrogateescape's way
    with pytest.raises(UnicodeEncodeError):
        _sdk(body)
    sent = json_body(body)
    assert b"\\udce9" in sent
    assert json.loads(sent) == body
