"""Real, small images made here (no image library): a PNG any decoder reads, of the size asked."""

from __future__ import annotations

import hashlib
import struct
import zlib


def png(width: int, height: int, seed: int = 0) -> bytes:
    """A valid RGB PNG of `width` x `height`, its pixels varying with `seed` (so two seeds give two hashes)."""
    row = bytes((seed + x) % 256 for x in range(width * 3))
    raw = b"".join(b"\x00" + row for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
