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


TOOLS = [screenshot]
