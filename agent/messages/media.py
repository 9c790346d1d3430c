"""Files in messages: image and document blocks, held by reference.

A transcript's file block holds the file's SHA-256, size, type and name, never its bytes: a long chat with
screenshots is read at every turn, and its history would otherwise weigh its files' megabytes at every read. The
bytes live once per chat in the store (tasks/store/files.py), keyed by that hash, and reach a request through a
`FileSource` as the base64 its API takes; the same hash gives the same bytes on every replay.

The type of a file is read from its bytes (`sniff`), never taken from what a client declares: a declared type
must agree with it, and the checks (`check_file`) are pure, so a client refuses a bad file before anything is
enqueued.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import re
from typing import Any, Literal, Protocol

import imagesize

from agent.messages.base import _Block

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
DOCUMENT_TYPES = ("application/pdf",)
MEDIA_TYPES = IMAGE_TYPES + DOCUMENT_TYPES
MAX_FILES = 20  # per message
MiB = 1024 * 1024
# What the providers take per file (Anthropic: 5 MB an image; a PDF's request may be larger): the ceiling a
# setting can lower, never raise.
IMAGE_LIMIT = 5 * MiB
DOCUMENT_LIMIT = 20 * MiB


class ImageBlock(_Block):
    type: Literal["image"] = "image"
    media_type: str
    sha256: str
    bytes: int
    name: str | None = None


class DocumentBlock(_Block):
    type: Literal["document"] = "document"
    media_type: str
    sha256: str
    bytes: int
    name: str | None = None


FileBlock = ImageBlock | DocumentBlock


class FileRefused(ValueError):
    """A file a message cannot carry (its type, its size, or one file too many): refused before any enqueue."""


class FileSource(Protocol):
    """Where a request finds the bytes of the files its history refers to."""

    def base64(self, sha256: str) -> str | None:
        """The file's bytes as base64, or None when the store no longer has them."""
        ...


def sniff(data: bytes) -> str | None:
    """The media type the bytes say they are (their magic numbers), or None for a type a message cannot carry."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def limit(media_type: str, setting: int | None = None) -> int:
    """The most bytes a file of this type may have: the lower of `BATON_MAX_FILE_BYTES` and the provider's limit."""
    ceiling = DOCUMENT_LIMIT if media_type in DOCUMENT_TYPES else IMAGE_LIMIT
    return ceiling if setting is None else min(setting, ceiling)


def check_file(data: bytes, declared: str | None, name: str | None = None, *, max_bytes: int | None = None) -> str:
    """The file's media type, read from its bytes; `FileRefused` (saying why, naming the file) when a message
    cannot carry it."""
    label = f"file {name!r}" if name else "a file"
    found = sniff(data)
    if found is None:
        allowed = ", ".join(MEDIA_TYPES)
        raise FileRefused(f"{label} is not a supported type (images: PNG, JPEG, GIF, WebP; PDF): {allowed}")
    if declared is not None and declared.lower() != found:
        raise FileRefused(f"{label} is declared {declared} but its bytes are {found}")
    most = limit(found, max_bytes)
    if len(data) > most:
        raise FileRefused(f"{label} has {len(data)} bytes, over the limit of {most} for {found}")
    return found


def check_count(count: int) -> None:
    if count > MAX_FILES:
        raise FileRefused(f"a message carries at most {MAX_FILES} files, not {count}")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_block(data: bytes, media_type: str, name: str | None = None) -> FileBlock:
    """The transcript's block for a checked file (its bytes go to the store under the same hash)."""
    kind = DocumentBlock if media_type in DOCUMENT_TYPES else ImageBlock
    return kind(media_type=media_type, sha256=digest(data), bytes=len(data), name=name)


# Anthropic scales an image down to at most 1568 pixels on its long edge and about 1.15 megapixels before the model
# sees it, then counts width x height / 750 tokens.
LONG_EDGE = 1568
MAX_PIXELS = 1_150_000
PIXELS_PER_TOKEN = 750
UNREADABLE_IMAGE_TOKENS = math.ceil(MAX_PIXELS / PIXELS_PER_TOKEN)  # an image whose header says no size: the most


def _image_size(data: bytes) -> tuple[int, int]:
    try:
        return imagesize.get(io.BytesIO(data))  # type: ignore[no-any-return]
    except (ValueError, OSError):
        return -1, -1


def image_tokens(data: bytes) -> int:
    """The tokens an image costs the model, as Anthropic counts them: width x height / 750 after its scaling, the
    size read from the image's header."""
    width, height = _image_size(data)
    if width <= 0 or height <= 0:
        return UNREADABLE_IMAGE_TOKENS
    scale = min(1.0, LONG_EDGE / max(width, height), math.sqrt(MAX_PIXELS / (width * height)))
    return max(1, math.ceil(int(width * scale) * int(height * scale) / PIXELS_PER_TOKEN))


HEAD_CHARS = 16 * 1024  # base64 characters of an image's head: where a PNG's, GIF's or WebP's size is, and most JPEGs'


def image_tokens_b64(data: str) -> int:
    """`image_tokens` of a base64 image, decoding only its head when the size is there (a request of twenty 500 KB
    screenshots would otherwise decode 10 MB at every estimate); the whole image when it is not (a JPEG whose
    frame header follows a long EXIF segment)."""
    head = base64.b64decode(data[:HEAD_CHARS])
    if min(_image_size(head)) > 0 or len(data) <= HEAD_CHARS:
        return image_tokens(head)
    return image_tokens(base64.b64decode(data))


# A PDF's pages reach the model as text and as an image each: Anthropic states 1,500-3,000 tokens a page. The
# estimate takes the upper figure, per page object in the file (at least one).
PDF_PAGE_TOKENS = 3_000
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def pdf_pages(data: bytes) -> int:
    """Pages of a PDF as its page objects say (`/Type /Page`, not `/Pages`); at least one."""
    return max(1, len(_PAGE.findall(data)))


def document_tokens(data: bytes) -> int:
    """The tokens a PDF is estimated to cost the model: `PDF_PAGE_TOKENS` a page."""
    return PDF_PAGE_TOKENS * pdf_pages(data)


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def media_to_api(block: FileBlock, files: FileSource | None) -> dict[str, Any]:
    """The Messages API form of a file block: its bytes as a base64 source. A file the store no longer has (or a
    history read without a store) goes as a line of text saying so: the request stays one the API accepts."""
    data = files.base64(block.sha256) if files is not None else None
    if data is None:
        return {"type": "text", "text": f"[{block.type} {block.name or block.sha256[:12]} is no longer available]"}
    out: dict[str, Any] = {
        "type": block.type, "source": {"type": "base64", "media_type": block.media_type, "data": data},
    }
    if isinstance(block, DocumentBlock) and block.name:
        out["title"] = block.name
    return out
