"""Thinking bound to its prefix: which kept thinking blocks a request may carry after Baton changed what came before.

Newer Anthropic models ("preserved thinking", from Claude Fable 5.1) bind each thinking block to the prefix it was
produced after: the top-level `system`, the `tools` and every earlier message (cache marks left out). If that prefix
changed, the block and every later one are invalid: the request is a 400 ("The block is bound to a different
conversation"), or, with `thinking.block_binding.prefix_mismatch_behavior = "drop_block"` (a beta), the API drops
them itself. Baton changes prefixes on purpose: the context budget elides old results, an agent upgraded mid-run
changes the system prompt and tools, history repair merges and backfills, a chat's next turn starts its elision over.

So every signed block records (`bound_to`, Baton's own field, never sent) a digest of the request it was produced
after, and each request is checked against it, walking the messages in order over what is actually sent:

1. a block whose prefix is unchanged is sent back as it came (append-only: the normal case, nothing to decide);
2. a stale block is left out (what the error itself asks for), and so is every later block bound to a prefix that
   held it; a block produced after Baton had already left it out is bound to that shorter prefix and stays valid;
3. but a stale block the request cannot do without (the last assistant message of a tool loop with thinking on:
   the API requires its thinking back) cannot be left out: then nothing is left out, and the request asks the API to
   drop what is stale (`drop_block`), so the bytes before every block are exactly those it was produced after.

The same inputs always give the same request (a replay sends the same bytes). Blocks without a digest (a compatible
server's unsigned reasoning, or a block stored before digests existed) are kept as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent.json_text import canonical
from agent.messages import BOUND  # the wire dict's private key carrying a block's digest; removed here, never sent

_REASONING = ("thinking", "redacted_thinking")
_IGNORED = frozenset({"cache_control", BOUND})  # not part of what a block is bound to


@dataclass(frozen=True)
class Bound:
    """A request's messages with the thinking it may carry, and whether it asks the API to drop stale blocks."""

    messages: list[dict[str, Any]]
    drop_stale: bool = False
    left_out: int = 0  # stale blocks Baton left out of this request


def prefix_digest(system: Any, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str:
    """The digest a block produced after this request is bound to (what a block at the end of it is checked against)."""
    running = _start(system, tools)
    for message in messages:
        _feed(running, message)
    return str(running.hexdigest()[:32])


def bind_thinking(
    system: Any, tools: list[dict[str, Any]], messages: list[dict[str, Any]], *, thinking_on: bool
) -> Bound:
    """The messages to send (private digests removed): stale thinking left out where the API allows it, else kept with
    `drop_stale` set (module doc). `messages` are not changed."""
    if not any(BOUND in b for b in wire_blocks(messages)):
        return Bound(messages)
    kept = _walk(system, tools, messages, keep_stale=False)
    if thinking_on and _lost_required(messages, kept.messages):
        return _walk(system, tools, messages, keep_stale=True)
    return kept


def _walk(system: Any, tools: list[dict[str, Any]], messages: list[dict[str, Any]], *, keep_stale: bool) -> Bound:
    running = _start(system, tools)
    out: list[dict[str, Any]] = []
    stale = left_out = 0
    for message in messages:
        if any(BOUND in b for b in _blocks(message)):
            here = running.hexdigest()[:32]
            blocks = []
            for block in message["content"]:
                bound = block.get(BOUND)
                if bound is not None and bound != here:
                    stale += 1
                    if not keep_stale:
                        left_out += 1
                        continue
                blocks.append({k: v for k, v in block.items() if k != BOUND})
            message = {**message, "content": blocks}
        out.append(message)
        _feed(running, message)
    return Bound(out, drop_stale=keep_stale and stale > 0, left_out=left_out)


def _lost_required(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> bool:
    """Whether the request's last assistant message, one the API wants its thinking back in (it made the tool calls
    the last user message answers), lost thinking it had."""
    if len(before) < 2 or before[-2].get("role") != "assistant" or before[-1].get("role") != "user":
        return False
    if not any(b.get("type") == "tool_use" for b in _blocks(before[-2])):
        return False
    had = sum(b.get("type") in _REASONING for b in _blocks(before[-2]))
    return sum(b.get("type") in _REASONING for b in _blocks(after[-2])) < had


def _start(system: Any, tools: list[dict[str, Any]]) -> Any:
    running = hashlib.sha256()
    running.update(_canonical({"system": system, "tools": tools}))
    return running


def _feed(running: Any, message: dict[str, Any]) -> None:
    running.update(b"\x1e")
    running.update(_canonical(message))


def _canonical(value: Any) -> bytes:
    return canonical(_plain(value)).encode()


def _plain(value: Any) -> Any:
    """`value` without what a block is not bound to (cache marks, Baton's digests)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _IGNORED}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def wire_blocks(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every block of the messages (wire form), in one generator: every request looks at every block of its history
    for reasoning, and a list or a generator a message cost ~0.3 ms a look at 1,000 messages."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    yield block


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
