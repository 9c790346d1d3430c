"""What both fakes do with a user's files: refuse the blocks the real APIs refuse, and say which bytes arrived.

Both fakes see requests in the Messages API's form (the OpenAI fake turns `image_url` and `file` parts back into
`image` / `document` blocks), so one check and one report serve both. The report is each file block's type, media
type and the SHA-256 of its decoded bytes, per request: a test compares it with the hash of the bytes it sent,
and a replayed request's with the first one's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

# The magic numbers of the types the APIs take (the real ones refuse an image whose bytes are not its type).
_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
    "application/pdf": (b"%PDF-",),
}


def _file_blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            out += [b for b in content if isinstance(b, dict) and b.get("type") in ("image", "document")]
    return out


def _decoded(block: Mapping[str, Any]) -> tuple[str, bytes] | str:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        return f"{block.get('type')}.source.type: only base64 sources are served by the fake"
    media_type = str(source.get("media_type"))
    if media_type not in _MAGIC or (block.get("type") == "document") != (media_type == "application/pdf"):
        return f"{block.get('type')}.source.media_type: Input should be one of {', '.join(_MAGIC)}"
    try:
        data = base64.b64decode(str(source.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        return f"{block.get('type')}.source.data: invalid base64 data"
    return media_type, data


def file_problem(body: Mapping[str, Any]) -> str | None:
    """The 400 the real API gives a file block it cannot read (bad base64, a type it does not take, bytes that
    are not their declared type), or None."""
    for block in _file_blocks(body):
        decoded = _decoded(block)
        if isinstance(decoded, str):
            return decoded
        media_type, data = decoded
        if not data.startswith(_MAGIC[media_type]):
            return f"Image does not match the provided media type {media_type}"
    return None


def received(body: Mapping[str, Any]) -> list[dict[str, str]]:
    """Each file block of a request: `type`, `media_type` and the `sha256` of the bytes it carried."""
    out = []
    for block in _file_blocks(body):
        decoded = _decoded(block)
        if isinstance(decoded, str):
            continue
        media_type, data = decoded
        out.append({"type": str(block["type"]), "media_type": media_type, "sha256": hashlib.sha256(data).hexdigest()})
    return out


def data_url_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Chat Completions `image_url` or `file` part as the Messages API block it stands for, or None."""
    if part.get("type") == "image_url":
        url, kind, title = str((part.get("image_url") or {}).get("url", "")), "image", None
    elif part.get("type") == "file":
        file = part.get("file") or {}
        url, kind, title = str(file.get("file_data", "")), "document", file.get("filename")
    else:
        return None
    head, _, data = url.partition(",")
    media_type = head.removeprefix("data:").removesuffix(";base64")
    block: dict[str, Any] = {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}}
    if title:
        block["title"] = title
    return block
