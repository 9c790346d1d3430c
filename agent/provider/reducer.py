"""The stream reducer: raw Messages API stream events folded into a snapshot, one event at a time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.messages import AnswerBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from agent.provider.base import Answer, TokenUsage


@dataclass
class Snapshot:
    """The answer so far. `stopped` only after `message_stop`: anything less is partial."""

    message_id: str = ""
    model: str = ""
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    reasoning_tokens: int = 0
    stopped: bool = False
    had_output: bool = False

    @property
    def usage(self) -> TokenUsage:
        return TokenUsage(
            self.input_tokens,
            self.output_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
            self.reasoning_tokens,
        )

    def to_answer(self) -> Answer:
        content: list[AnswerBlock] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block["type"] == "text":
                content.append(TextBlock(text=block["text"]))
            elif block["type"] == "thinking":
                # Kept exactly: the API verifies the signature when the block comes back in a tool loop.
                content.append(ThinkingBlock(thinking=block.get("thinking", ""), signature=block.get("signature")))
            elif block["type"] == "redacted_thinking":
                content.append(RedactedThinkingBlock(data=block["data"]))
            elif block["type"] == "tool_use":
                raw = block.get("partial_json", "")
                tool_input = json.loads(raw) if raw else dict(block.get("input") or {})
                content.append(ToolUseBlock(id=block["id"], name=block["name"], input=tool_input))
        return Answer(self.message_id, tuple(content), self.stop_reason, self.usage, self.model)


def accumulate(event: dict[str, Any], snapshot: Snapshot) -> Snapshot:
    """Fold one raw stream event into the snapshot; unknown event types leave it unchanged."""
    kind = event.get("type")
    if kind == "message_start":
        message = event.get("message", {})
        snapshot.message_id = message.get("id", "")
        snapshot.model = str(message.get("model") or "")
        usage = message.get("usage") or {}
        snapshot.input_tokens = usage.get("input_tokens", 0) or 0
        snapshot.output_tokens = usage.get("output_tokens", 0) or 0
        snapshot.cache_creation_input_tokens = usage.get("cache_creation_input_tokens", 0) or 0
        snapshot.cache_read_input_tokens = usage.get("cache_read_input_tokens", 0) or 0
    elif kind == "content_block_start":
        block = dict(event["content_block"])
        if block.get("type") == "tool_use":
            block["partial_json"] = ""
        snapshot.blocks[event["index"]] = block
        snapshot.had_output = True
    elif kind == "content_block_delta":
        block = snapshot.blocks[event["index"]]
        delta = event["delta"]
        if delta.get("type") == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif delta.get("type") == "input_json_delta":
            block["partial_json"] += delta.get("partial_json", "")
        elif delta.get("type") == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif delta.get("type") == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        snapshot.had_output = True
    elif kind == "message_delta":
        snapshot.stop_reason = (event.get("delta") or {}).get("stop_reason", snapshot.stop_reason)
        usage = event.get("usage") or {}
        if usage.get("output_tokens") is not None:
            snapshot.output_tokens = usage["output_tokens"]
        thinking = (usage.get("output_tokens_details") or {}).get("thinking_tokens")
        if thinking is not None:
            snapshot.reasoning_tokens = int(thinking)
        # The final usage may restate the input figures (cumulative, as the API sends them); absent or
        # null, the ones from message_start stand.
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            if usage.get(name):
                setattr(snapshot, name, usage[name])
    elif kind == "message_stop":
        snapshot.stopped = True
    return snapshot
