"""The context budget: how big a request is, and which old tool results to elide so it fits.

Pure functions of their inputs, so the request a step sends is a function of the journal alone and a
replay (or a resume) elides exactly as the first execution did.

The estimate (no tokenizer, no network): the UTF-8 bytes of each part's canonical JSON (sorted keys, no
spaces), divided by 4 and rounded up, summed over the tools, the system prompt and every message. Claude's
tokenizer averages about 3.5-4 characters per token on English and code; the JSON quoting and keys the
estimate counts (and the API does not) keep it on the generous side for ordinary text. Where it is wrong the
provider says so ("prompt is too long"), and the compaction below scales by how wrong it was.

Elision: the tool results of model messages [0, cut) are replaced by a short marker that keeps their
`tool_use_id` and `is_error`, so every tool_use keeps its tool_result; so are the images and PDFs of finished
turns' user messages (a line of text saying which), never those of the turn under way. Only results and files
are touched, never a person's text or the model's calls, and never the latest round of results (the current
round). The cut only
moves forward, in one batch down to a lower watermark, so the cached prefix is rebuilt rarely.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.json_text import canonical
from agent.loop.failures import Overflow
from agent.messages.media import UNREADABLE_IMAGE_TOKENS, document_tokens, image_tokens_b64

DEFAULT_CONTEXT_TOKENS = 200_000  # the standard input window of current Claude models
BYTES_PER_TOKEN = 4
LOW_WATERMARK = 0.6  # an elision batch brings the estimate down to this share of the budget
COMPACT_SHARE = 0.5  # after "prompt is too long": down to this share of the window the provider stated
ELIDED = "[Old tool result elided to fit the context window ({chars} characters).]"
FILE_TYPES = ("image", "document")
ELIDED_FILE = "[Old {kind} {name} elided to fit the context window.]"
ELIDED_IMAGES = "[Old tool result elided to fit the context window ({chars} characters, {images} images).]"


def context_window(model: str) -> int:
    """The input window Baton assumes for `model` when `BATON_CONTEXT_TOKENS` is unset.

    Every current Claude model takes 200,000 input tokens by default (larger windows need a beta header
    Baton does not send), so this is one figure for all; the setting overrides it.
    """
    return DEFAULT_CONTEXT_TOKENS


def result_cap_chars(context_tokens: int, default: int) -> int:
    """Characters one tool result may keep when recorded: `default`, or an eighth of a small budget."""
    return max(200, min(default, context_tokens * BYTES_PER_TOKEN // 8))


def estimate_tokens(value: Any) -> int:
    """Estimated tokens of one part of a request: ceil(UTF-8 bytes of its canonical JSON / 4); 0 for None. A
    message's images count as the model counts them (`image_tokens`), not as their base64."""
    if value is None or value == [] or value == "":
        return 0
    value, images = _without_images(value)
    text = canonical(value)
    size = len(text) if text.isascii() else len(text.encode())  # ASCII: as many bytes as characters, no copy
    return math.ceil(size / BYTES_PER_TOKEN) + images


def _image_free(block: Any) -> tuple[Any, int]:
    """A block with its image's or PDF's base64 left out (or its tool result's images'), and what they cost."""
    if not isinstance(block, dict):
        return block, 0
    source = block.get("source")
    if block.get("type") in FILE_TYPES and isinstance(source, dict) and source.get("type") == "base64":
        data = str(source.get("data", ""))
        try:
            tokens = image_tokens_b64(data) if block["type"] == "image" else document_tokens(base64.b64decode(data))
        except (binascii.Error, ValueError):
            tokens = UNREADABLE_IMAGE_TOKENS
        return {**block, "source": {**source, "data": ""}}, tokens
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list):
        parts = [_image_free(part) for part in content]
        if any(tokens for _, tokens in parts):
            return {**block, "content": [part for part, _ in parts]}, sum(tokens for _, tokens in parts)
    return block, 0


def _without_images(value: Any) -> tuple[Any, int]:
    """A message with its images' bytes left out, and their tokens (a value that is no message: as it is)."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list) or not _has_files(content):
        return value, 0
    blocks = [_image_free(block) for block in content]
    return {**value, "content": [block for block, _ in blocks]}, sum(tokens for _, tokens in blocks)


def _has_files(content: list[Any]) -> bool:
    """Whether a message or its results' parts hold an image or a PDF: a cheap look before a copy."""
    for block in content:
        if isinstance(block, dict):
            if block.get("type") in FILE_TYPES:
                return True
            inner = block.get("content")
            if isinstance(inner, list) and any(isinstance(p, dict) and p.get("type") in FILE_TYPES for p in inner):
                return True
    return False


def request_tokens(tools: list[dict[str, Any]], system: Any, messages: list[dict[str, Any]]) -> int:
    """The estimate of a whole request: its tools, its system prompt and each message, summed."""
    return estimate_tokens(tools) + estimate_tokens(system) + sum(estimate_tokens(m) for m in messages)


def _elided_block(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content", "")
    if isinstance(content, str):
        if content.startswith("[Old tool result elided"):
            return block
        return {**block, "content": ELIDED.format(chars=len(content))}
    parts = [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []
    images = sum(1 for p in parts if p.get("type") == "image")
    chars = sum(len(str(p.get("text", ""))) for p in parts if p.get("type") == "text")
    # An old result's images go with its text: each costs the model up to ~1,500 tokens at every request.
    return {**block, "content": ELIDED_IMAGES.format(chars=chars, images=images) if images else ELIDED.format(
        chars=chars)}


def _elided_file(block: dict[str, Any]) -> dict[str, Any]:
    name = block.get("title") or (block.get("source") or {}).get("media_type", "")
    return {"type": "text", "text": ELIDED_FILE.format(kind=block.get("type"), name=name)}


def elide(messages: list[dict[str, Any]], cut: int) -> list[dict[str, Any]]:
    """`messages` (wire form) with the tool results and the files of messages [0, cut) elided; the files of the
    person's latest message (the turn under way) are kept wherever the cut is. The input is left as it was."""
    if cut <= 0:
        return messages
    latest = _latest_words(messages)
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if index < cut and message.get("role") == "user" and _elidable(message, files=index != latest):
            blocks = [
                _elided_block(b) if b.get("type") == "tool_result"
                else _elided_file(b) if b.get("type") in FILE_TYPES and index != latest else b
                for b in message["content"]
            ]
            out.append({**message, "content": blocks})
        else:
            out.append(message)
    return out


def _elidable(message: dict[str, Any], *, files: bool = True) -> bool:
    content = message.get("content")
    kinds = ("tool_result", *FILE_TYPES) if files else ("tool_result",)
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in kinds for b in content)


def _has_results(message: dict[str, Any]) -> bool:
    return _elidable(message, files=False)


def _latest_words(messages: list[dict[str, Any]]) -> int:
    """The index of the person's latest message (a user message that is not a round of tool results), or -1."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user" and not _has_results(messages[index]):
            return index
    return -1


def max_cut(messages: list[dict[str, Any]]) -> int:
    """How far a cut may go: up to (not into) the current round, the last message holding tool results; or, when
    the person wrote after it, up to (not into) their latest message: all before it is finished turns, whose
    results and files are old. (A chat that never ran a tool could otherwise never elide its old screenshots.)"""
    last = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user" and _has_results(messages[index]):
            last = index
            break
    return max(last, _latest_words(messages))


@dataclass(frozen=True)
class Fit:
    """A cut and the estimate of the request it gives."""

    cut: int
    tokens: int


def _size(message: dict[str, Any]) -> tuple[int, int]:
    """A message's estimate as sent, and with its tool results and files elided."""
    full = estimate_tokens(message)
    return full, estimate_tokens(elide([message, _LATER], 1)[0]) if _elidable(message) else full


_LATER = {"role": "user", "content": "later words"}  # so `elide` sees `message` as a finished turn's


class Sizes:
    """The estimates of a loop's wire messages, each measured once.

    A loop's view shares the same message dicts from step to step and never changes them, so a dict's
    estimate, once known, holds; measuring every message again at every step made a run of N rounds cost
    O(N^2) canonical JSON (most of a 500-round run's time). Keyed by identity, with the dict held so its id
    is not reused.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[dict[str, Any], int, int]] = {}
        self._overhead: tuple[object, tuple[object, ...], int] | None = None

    def overhead(self, tools: object, key: tuple[object, ...], measure: Callable[[], int]) -> int:
        """The estimate of the tools and system part, measured once while the loop sends the same tool list (the
        object, held) with the same `key` (its system prompt and caching): every step measured it again, the JSON
        of every tool's schema (an MCP server's dozens) before each model call."""
        known = self._overhead
        if known is None or known[0] is not tools or known[1] != key:
            known = self._overhead = (tools, key, measure())
        return known[2]

    def of(self, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
        full: list[int] = []
        small: list[int] = []
        kept: dict[int, tuple[dict[str, Any], int, int]] = {}  # only this request's: a repaired view forgets
        for message in messages:
            known = self._known.get(id(message))
            if known is None or known[0] is not message:
                known = (message, *_size(message))
            kept[id(message)] = known
            full.append(known[1])
            small.append(known[2])
        self._known = kept
        return full, small


def _sizes(messages: list[dict[str, Any]], sizes: Sizes | None) -> tuple[list[int], list[int]]:
    return (sizes or Sizes()).of(messages)


def fit_at(overhead: int, messages: list[dict[str, Any]], cut: int, *, sizes: Sizes | None = None) -> Fit:
    """The estimate with the cut at `cut` (`overhead`: the tools and system part)."""
    full, small = _sizes(messages, sizes)
    return Fit(cut, overhead + sum(small[:cut]) + sum(full[cut:]))


def choose_cut(
    overhead: int,
    messages: list[dict[str, Any]],
    *,
    current: int,
    budget: int,
    target: int,
    sizes: Sizes | None = None,
) -> Fit:
    """Where the cut goes for this request: `current` while the request fits `budget`; past it, the smallest
    cut (oldest results first) that brings the estimate to `target` or below, else as far as the cut may go.
    `sizes` remembers the estimates of messages already measured (the same dicts, unchanged).
    """
    full, small = _sizes(messages, sizes)
    limit = max(current, max_cut(messages))
    current = min(current, len(messages))
    total = overhead + sum(small[:current]) + sum(full[current:])
    if total <= budget:
        return Fit(current, total)
    cut, latest = current, _latest_words(messages)
    while cut < limit and total > target:
        if cut != latest:  # the turn under way keeps its files
            total -= full[cut] - small[cut]
        cut += 1
    return Fit(cut, total)


@dataclass(frozen=True)
class Compaction:
    """The estimate targets after the provider refused a request as too long."""

    target: int  # elide down to this estimate
    ceiling: int  # an estimate above this surely does not fit: failing beats re-sending


def compaction_for(overflow: Overflow | None, *, sent_estimate: int, budget: int) -> Compaction:
    """Targets after "prompt is too long": scaled by how far our estimate was off, aimed at half the window.

    With the provider's figures ("N tokens > M maximum") our estimate is scaled by N / (our estimate of the
    refused request) and the window is min(budget, M); without them, the refused request's own estimate is
    the ceiling (it did not fit).
    """
    window = min(budget, overflow.maximum) if overflow is not None and overflow.maximum else budget
    if overflow is not None and overflow.tokens and sent_estimate > 0:
        ceiling = int(window / max(1.0, overflow.tokens / sent_estimate))
    else:
        ceiling = min(window, max(0, sent_estimate - 1))
    return Compaction(target=int(ceiling * COMPACT_SHARE), ceiling=ceiling)
