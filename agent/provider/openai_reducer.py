"""Chat Completions stream chunks folded into an answer, one chunk at a time.

Text arrives as `delta.content`; a tool call as `delta.tool_calls` entries keyed by `index`, the first with its
`id` and `function.name`, its `function.arguments` split across any number of chunks: they are only
concatenated here and parsed as JSON at the end, once the stream said it finished. A `finish_reason` ends the
answer; with `stream_options.include_usage` a last chunk with no choices carries the usage, which maps to
Baton's fields: `prompt_tokens` less the cached ones is `input_tokens`, the cached ones (read from OpenAI's
automatic prompt cache) `cache_read_input_tokens`, `completion_tokens` `output_tokens`. Nothing is ever
written to the cache explicitly, so `cache_creation_input_tokens` stays 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.loop.failures import IncompleteStream
from agent.messages import AnswerBlock, TextBlock, ThinkingBlock, ToolUseBlock
from agent.provider.base import Answer, TokenUsage

# The API's finish reasons in Baton's vocabulary (the Messages API's `stop_reason`, as journal records keep it).
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


class MalformedToolCall(IncompleteStream):
    """A finished stream whose tool call arguments are not a JSON object: not an answer Baton can act on, so an
    attempt to discard and replay like a stream cut short (the provider wraps it in one)."""


@dataclass
class ChatSnapshot:
    """The answer so far; `finished` only once a choice carried a `finish_reason`."""

    message_id: str = ""
    model: str = ""
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)  # `reasoning_content` or `reasoning` deltas, in order
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    had_output: bool = False

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def to_answer(self) -> Answer:
        content: list[AnswerBlock] = []
        reasoning = "".join(self.reasoning)
        if reasoning:  # it came first: the model reasoned, then answered
            content.append(ThinkingBlock(thinking=reasoning))
        text = "".join(self.text)
        if text:
            content.append(TextBlock(text=text))
        for index in sorted(self.calls):
            call = self.calls[index]
            raw = "".join(call["arguments"])
            try:
                tool_input = json.loads(raw) if raw.strip() else {}
            except ValueError as err:
                raise MalformedToolCall(f"tool call {call['name']!r}: arguments are not JSON: {err}") from err
            if not isinstance(tool_input, dict):
                raise MalformedToolCall(f"tool call {call['name']!r}: arguments are not a JSON object")
            # A compatible server that sends no id still gets one that is unique in the chat (the journal keeps it).
            call_id = call["id"] or f"call_{self.message_id or 'x'}_{index}"
            content.append(ToolUseBlock(id=call_id, name=call["name"], input=tool_input))
        stop = STOP_REASONS.get(self.finish_reason or "", self.finish_reason)
        return Answer(self.message_id, tuple(content), stop, self.usage, self.model)


def usage_of(raw: dict[str, Any]) -> TokenUsage:
    """The usage object of the last chunk in Baton's four fields."""
    prompt = int(raw.get("prompt_tokens") or 0)
    cached = int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return TokenUsage(
        input_tokens=max(0, prompt - cached),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_input_tokens=cached,
        reasoning_tokens=int((raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0),
    )


def accumulate(chunk: dict[str, Any], snapshot: ChatSnapshot) -> str | None:
    """Fold one chunk into the snapshot; returns the text it added (for live text), if any."""
    if not snapshot.message_id and chunk.get("id"):
        snapshot.message_id = str(chunk["id"])
    if not snapshot.model and chunk.get("model"):
        snapshot.model = str(chunk["model"])
    if chunk.get("usage"):
        snapshot.usage = usage_of(chunk["usage"])
    added: str | None = None
    for choice in chunk.get("choices") or []:
        if choice.get("index", 0) != 0:
            continue  # Baton asks for one choice
        delta = choice.get("delta") or {}
        thought = delta.get("reasoning_content") or delta.get("reasoning")  # servers name it either way
        if isinstance(thought, str) and thought:
            snapshot.reasoning.append(thought)
            snapshot.had_output = True
        if delta.get("content"):
            added = delta["content"]
            snapshot.text.append(added)
            snapshot.had_output = True
        for piece in delta.get("tool_calls") or []:
            call = snapshot.calls.setdefault(int(piece.get("index", 0)), {"id": "", "name": "", "arguments": []})
            if piece.get("id"):
                call["id"] = piece["id"]
            function = piece.get("function") or {}
            if function.get("name"):
                call["name"] = function["name"]
            if function.get("arguments"):
                call["arguments"].append(function["arguments"])
            snapshot.had_output = True
        if choice.get("finish_reason"):
            snapshot.finish_reason = choice["finish_reason"]
    return added
