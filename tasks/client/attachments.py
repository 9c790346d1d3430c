"""Files a client attaches to a message: `Attachment`, and the checks every way in shares before an enqueue.

The checks themselves are agent/messages/media.py's (the type read from the bytes, the limits); here they become
the clients' `ValidationError` (exit 2, 422), and the checked files become the transcript's blocks and the
(sha256, bytes) pairs the store keeps.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.messages.media import FileBlock, FileRefused, check_count, check_file, file_block, sniff
from tasks.client.core import ValidationError


@dataclass(frozen=True)
class Attachment:
    """A file a message carries: its bytes, its declared media type (it must agree with the bytes) and a name."""

    data: bytes
    media_type: str
    name: str | None = None

    @classmethod
    def from_path(cls, path: str | Path) -> Attachment:
        """A file read from disk, its type read from its bytes (an unsupported one is refused at the send)."""
        p = Path(path)
        data = p.read_bytes()
        return cls(data, sniff(data) or "application/octet-stream", p.name)

    @classmethod
    def from_base64(cls, data: str, media_type: str, name: str | None = None) -> Attachment:
        """A file as the HTTP body and a data URL carry it; bad base64 is a `ValidationError`."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as err:
            label = f"file {name!r}" if name else "a file"
            raise ValidationError(f"{label} is not valid base64") from err
        return cls(raw, media_type, name)


@dataclass(frozen=True)
class CheckedFiles:
    """A message's files once checked: the transcript's blocks, and the bytes to store (once per hash)."""

    blocks: tuple[FileBlock, ...] = ()
    contents: tuple[tuple[str, bytes], ...] = ()


def check_attachments(files: Sequence[Attachment] | None, max_bytes: int | None) -> CheckedFiles:
    """Every file checked (`max_bytes`: `BATON_MAX_FILE_BYTES`), or a `ValidationError` saying which and why."""
    if not files:
        return CheckedFiles()
    try:
        check_count(len(files))
        blocks = []
        contents: dict[str, bytes] = {}
        for f in files:
            if not isinstance(f, Attachment):
                raise ValidationError("files must be a list of Attachment")
            kind = check_file(f.data, f.media_type, f.name, max_bytes=max_bytes)
            block = file_block(f.data, kind, f.name)
            blocks.append(block)
            contents[block.sha256] = f.data
    except FileRefused as err:
        raise ValidationError(str(err)) from None
    return CheckedFiles(tuple(blocks), tuple(contents.items()))
