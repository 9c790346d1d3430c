"""The fake Messages API's prompt cache and context window: pure bookkeeping, no sockets.

How the real API behaves (Anthropic's prompt-caching docs): the prompt is read in the order tools -> system ->
messages; a block marked `cache_control` ends a prefix that is written to the cache (1.25x the input price) or,
when an identical prefix is already there, read from it (0.1x); a mark also finds an earlier cached prefix up
to about 20 blocks before it; at most 4 marks per request; usage reports `input_tokens` (after the last mark),
`cache_creation_input_tokens` and `cache_read_input_tokens` separately, and all three count toward the window.

The fake's simplifications, on purpose:
- a prefix is keyed by a running sha256 over the canonical JSON (sorted keys, no spaces, `cache_control`
  removed) of each block up to the mark, with the role of a message block folded in: identical bytes hit,
  anything else misses, which is what matters to the client;
- tokens are estimated, not tokenized: ceil(canonical bytes of the block / 4), the same rule as Baton's own
  estimate (agent/history/context.py) but measured per block, so the figures are close without being identical;
- no TTL (a test is far shorter than 5 minutes) and one cache per server (the real one is per organization);
  `min_tokens` (default 0) stands for the model's minimum cacheable prefix, below which nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import dataclass
from typing import Any

LOOKBACK = 20
MAX_BREAKPOINTS = 4


@dataclass(frozen=True)
class CacheUsage:
    """What one request is billed; `total` is every input token (the window's measure)."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


def prompt_blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The request's blocks in cache order, each with whether it carries `cache_control`."""
    out: list[tuple[dict[str, Any], bool]] = []

    def add(block: Any, role: str) -> None:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        if not isinstance(block, dict):
            return
        marked = "cache_control" in block
        out.append(({"_in": role, **{k: v for k, v in block.items() if k != "cache_control"}}, marked))

    for tool in body.get("tools") or []:
        add(tool, "tools")
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add(block, "system")
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in [content] if isinstance(content, str) else content or []:
            add(block, str(message.get("role")))
    return out


def block_tokens(block: dict[str, Any]) -> int:
    """ceil(canonical bytes / 4), at least 1."""
    data = json.dumps(block, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return max(1, math.ceil(len(data) / 4))


def breakpoint_count(body: dict[str, Any]) -> int:
    return sum(1 for _, marked in prompt_blocks(body) if marked)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Every input token of the request, as the fake counts them (what its context limit measures)."""
    return sum(block_tokens(b) for b, _ in prompt_blocks(body))


class PromptCache:
    """Prefix hashes the fake has "seen" at a mark, and the usage a request gets against them."""

    def __init__(self, *, min_tokens: int = 0, lookback: int = LOOKBACK) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self._prefixes: set[str] = set()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._prefixes.clear()

    def account(self, body: dict[str, Any], *, write: bool = True) -> CacheUsage:
        """Bill `body`: the longest cached prefix a mark finds is read, the rest up to the last mark written."""
        blocks = prompt_blocks(body)
        hashes: list[str] = []
        cumulative: list[int] = []
        running = hashlib.sha256()
        total = 0
        for block, _ in blocks:
            running.update(json.dumps(block, sort_keys=True, separators=(",", ":")).encode() + b"\x00")
            hashes.append(running.copy().hexdigest())
            total += block_tokens(block)
            cumulative.append(total)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        if not marks:
            return CacheUsage(total, 0, 0)
        with self._lock:
            hit = -1
            for mark in marks:
                for j in range(mark, max(-1, mark - self.lookback - 1), -1):
                    if hashes[j] in self._prefixes:
                        hit = max(hit, j)
                        break
            last = marks[-1]
            read = cumulative[hit] if hit >= 0 else 0
            if cumulative[last] < self.min_tokens:  # too short to be cached: billed as plain input
                return CacheUsage(total, 0, 0)
            if write:
                self._prefixes.update(hashes[m] for m in marks if cumulative[m] >= self.min_tokens)
        written = cumulative[last] - read if last > hit else 0
        return CacheUsage(total - read - written, written, read)
