"""An MCP tool's result as Baton's: every kind of content kept as the model can take it.

Pure: a `CallToolResult` (read by its fields, so any SDK version's objects do) in, a tool's return value out, as a
`@tool` would return it: one text, or a list of texts and `Image`s in order.

- `text`: its text;
- `image`: the image (its bytes decoded; its type read from them, as every image's is); bytes no model takes (an
  SVG, say, or broken base64) are told as text instead;
- `resource_link`: its name, URI and description as text (the model can ask for it with a tool that reads it);
- an embedded resource: its text, or, for a blob, its URI and type;
- `audio` and anything newer: named (`[audio content]`);
- `structuredContent`: as JSON text, when the server gave no text (a server that sends both sends its text as the
  JSON's rendering, per the spec).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from agent.messages.media import IMAGE_TYPES, sniff
from agent.tools.content import Image

ToolValue = str | list[str | Image]


def _image(block: Any) -> str | Image:
    declared = getattr(block, "mime_type", None) or "unknown type"
    try:
        data = base64.b64decode(str(getattr(block, "data", "")), validate=True)
    except (binascii.Error, ValueError):
        return f"[image content ({declared}): not valid base64]"
    if sniff(data) not in IMAGE_TYPES:
        return f"[image content ({declared}): not an image type a model takes (PNG, JPEG, GIF, WebP)]"
    return Image(data)  # its type is what its bytes are; a server's declared type may be wrong


def _resource_link(block: Any) -> str:
    name = getattr(block, "title", None) or getattr(block, "name", None) or "resource"
    line = f"[resource link] {name}: {getattr(block, 'uri', '')}"
    mime = getattr(block, "mime_type", None)
    if mime:
        line += f" ({mime})"
    description = getattr(block, "description", None)
    return f"{line}\n{description}" if description else line


def _embedded(block: Any) -> str:
    resource = getattr(block, "resource", None)
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return text
    mime = getattr(resource, "mime_type", None) or "unknown type"
    return f"[embedded resource {getattr(resource, 'uri', '')} ({mime}), binary]"


def _part(block: Any) -> str | Image:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind == "image":
        return _image(block)
    if kind == "resource_link":
        return _resource_link(block)
    if kind == "resource":
        return _embedded(block)
    return f"[{kind or 'unknown'} content]"


def result_value(result: Any) -> ToolValue:
    """A `CallToolResult` as a tool's return value: one text when it holds no image, else its parts in order."""
    parts = [_part(block) for block in getattr(result, "content", None) or ()]
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(getattr(b, "type", None) == "text" for b in result.content or ()):
        parts.append(json.dumps(structured, ensure_ascii=False))
    if any(isinstance(p, Image) for p in parts):
        return parts
    return "\n".join(p for p in parts if isinstance(p, str))


def result_text(result: Any) -> str:
    """A result as text alone (an error's message): its images named."""
    value = result_value(result)
    return value if isinstance(value, str) else "\n".join("[image]" if isinstance(p, Image) else p for p in value)
