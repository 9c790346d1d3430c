"""What a tool may return beyond text: `Image` (`from agent.tools import Image`), and a return value as a result.

A `@tool` returns a `str`, or a list of `str` and `Image`, in the order the model should read them. An image's type
is read from its bytes (agent/messages/media.py `check_file`), never taken on trust: a tool that returns bytes
that are no image a model can take, or declares them as another type, gets an error result saying so. The result
holds the image by reference (its SHA-256); the bytes travel beside it to the chat's file store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.errors import ToolError
from agent.messages import ResultPart, TextBlock, ToolContent
from agent.messages.media import IMAGE_TYPES, FileRefused, ImageBlock, check_file, digest

FileBytes = dict[str, bytes]  # SHA-256 -> bytes: a result's images, for the store


@dataclass(frozen=True)
class Image:
    """An image a tool returns: its bytes and the media type it says they are (checked against the bytes)."""

    data: bytes = field(repr=False)
    media_type: str | None = None
    name: str | None = None


def image_block(image: Image) -> ImageBlock:
    """The result's reference to a returned image; `ToolError` when the bytes are no image a model takes."""
    try:
        found = check_file(image.data, image.media_type, image.name)
    except FileRefused as err:
        raise ToolError(f"the tool returned an image that cannot be sent: {err}") from None
    if found not in IMAGE_TYPES:
        raise ToolError(f"the tool returned {found} as an image; images are PNG, JPEG, GIF or WebP")
    return ImageBlock(media_type=found, sha256=digest(image.data), bytes=len(image.data), name=image.name)


def tool_content(value: Any, render: Callable[[Any], str]) -> tuple[ToolContent, FileBytes]:
    """A tool's return value as a result and the bytes of its images. A value with no image is one text, as
    before images (`render`: a list of strings stays the JSON it always was); with one, its items in order."""
    items = [value] if isinstance(value, Image) else value
    if not isinstance(items, list | tuple) or not any(isinstance(i, Image) for i in items):
        return render(value), {}
    parts: list[ResultPart] = []
    files: FileBytes = {}
    for item in items:
        if isinstance(item, Image):
            block = image_block(item)
            files[block.sha256] = item.data
            parts.append(block)
        else:
            parts.append(TextBlock(text=render(item)))
    return tuple(parts), files
