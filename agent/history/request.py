"""The request a model step sends: a pure function of the journal (the history, the loop state, the config).

No timestamps, no random ids, canonical order: a replayed attempt, a redelivered step and a resumed round
send the same bytes, so the provider's prompt cache recognises them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.history.binding import bind_thinking
from agent.history.caching import CACHE_CONTROL, MAX_BREAKPOINTS, system_blocks, with_breakpoints
from agent.history.context import LOW_WATERMARK, Fit, Sizes, choose_cut, elide, estimate_tokens
from agent.provider.base import ProviderRequest


@dataclass(frozen=True)
class RequestShape:
    """What every request of one unit shares."""

    model: str
    tools: list[dict[str, Any]]
    system: str | None
    prompt_cache: bool
    context_tokens: int
    max_tokens: int = 4096
    temperature: float | None = None
    thinking: str | int | None = None

    @property
    def overhead(self) -> int:
        """The estimate of the tools and system part, plus what the cache marks add when they are sent."""
        if not self.prompt_cache:
            return estimate_tokens(self.tools) + estimate_tokens(self.system)
        marks = MAX_BREAKPOINTS * estimate_tokens({"cache_control": CACHE_CONTROL})
        return estimate_tokens(self.tools) + estimate_tokens(system_blocks(self.system)) + marks


def overhead(shape: RequestShape, sizes: Sizes | None) -> int:
    """`shape.overhead`, measured once per loop (`sizes`, the loop's) while its tools and system stay the same."""
    if sizes is None:
        return shape.overhead
    return sizes.overhead(shape.tools, (shape.system, shape.prompt_cache), lambda: shape.overhead)


def plan_cut(
    shape: RequestShape,
    messages: list[dict[str, Any]],
    *,
    current: int,
    scale: float = 1.0,
    sizes: Sizes | None = None,
) -> Fit:
    """The elision cut for this request: unchanged while it fits the budget, else one batch to the watermark.

    `scale` is how many tokens the provider counted per estimated token on the previous step (never below 1):
    the estimate is measured against the budget divided by it, so the provider's own count steers the cut.
    """
    budget = shape.context_tokens / max(1.0, scale)
    return choose_cut(
        overhead(shape, sizes), messages, current=current, budget=int(budget), target=int(budget * LOW_WATERMARK),
        sizes=sizes,
    )


def token_scale(reported_prompt_tokens: int, estimate: int) -> float:
    """Provider tokens per estimated token of one request, at least 1 (the estimate is never trusted lower)."""
    if reported_prompt_tokens <= 0 or estimate <= 0:
        return 1.0
    return max(1.0, round(reported_prompt_tokens / estimate, 4))


def build_request(shape: RequestShape, messages: list[dict[str, Any]], *, cut: int) -> ProviderRequest:
    """The wire request: old results elided up to `cut`, cache breakpoints placed when caching is on, and the thinking
    whose prefix that changed left out, or left to the API to drop (agent/history/binding.py)."""
    sent = elide(messages, cut)
    system: str | list[dict[str, Any]] | None
    if not shape.prompt_cache:
        tools, system = list(shape.tools), shape.system
    else:
        tools, system, sent = with_breakpoints(shape.tools, shape.system, sent)
    bound = bind_thinking(system, tools, sent, thinking_on=shape.thinking is not None)
    return ProviderRequest(
        model=shape.model, messages=bound.messages, tools=tools, system=system, max_tokens=shape.max_tokens,
        temperature=shape.temperature, thinking=shape.thinking, drop_stale_thinking=bound.drop_stale,
    )


def calls_as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history of a request that offers no tools, its tool calls told as text: a chat whose agent had tools and
    has none now. The Messages API refuses tool_use and tool_result blocks in a request that defines no tools
    ("Requests which include tool_use or tool_result blocks must define tools"), so its provider sends this; a
    history without such blocks is returned as it is (the same list), so a tool-less chat's requests do not
    change."""
    if not any(_has_calls(m) for m in messages):
        return messages
    return [{**m, "content": [_told(b) for b in m["content"]]} if _has_calls(m) else m for m in messages]


def _has_calls(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") in ("tool_use", "tool_result") for b in content)


def _told(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") == "tool_use":
        told = f"[called tool {block.get('name')} with {json.dumps(block.get('input'), sort_keys=True)}]"
    elif block.get("type") == "tool_result":
        content = block.get("content")
        if isinstance(content, list):  # a result of text and images: its images named (a tool-less request's text)
            content = "".join(str(part.get("text", "")) if part.get("type") == "text" else "[image]"
                              for part in content if isinstance(part, dict))
        told = f"[tool result{' (error)' if block.get('is_error') else ''}: {content}]"
    else:
        return block
    return {"type": "text", "text": told}
