"""Python tools that return images (`agent.tools.Image`), for tests/integration/test_tool_images.py."""

from __future__ import annotations

from agent.tools import Image, tool
from tests.support.images import png


def screenshot_bytes(page: str) -> bytes:
    """The PNG `screenshot` returns for `page` (a test computes the same bytes)."""
    return png(40, 30, seed=len(page))


@tool
def screenshot(page: str) -> list[str | Image]:
    """Take a screenshot of a page."""
    return [f"screenshot of {page}", Image(screenshot_bytes(page), "image/png", name=f"{page}.png")]


def heavy_bytes(seed: int) -> bytes:
    """A ~300 KB PNG of 1000 x 1000 (1334 tokens as Anthropic counts it; ~107,000 if its base64 were counted)."""
    return png(1000, 1000, seed=seed) + bytes(range(256)) * 1200


@tool
def heavy_screenshots(count: int) -> list[str | Image]:
    """Take `count` full-page screenshots."""
    return [f"{count} screenshots", *(Image(heavy_bytes(n), "image/png", name=f"page{n}.png") for n in range(count))]


TOOLS = [screenshot, heavy_screenshots]
