"""A chat's files, stored once by their SHA-256 beside its transcript and deleted with it.

The transcript holds only a file's reference (agent/messages/media.py); the bytes are one hash field per file,
kept as the base64 a request carries (the store's clients may decode replies as text, and every request needs
that form anyway). A file's hash names its bytes forever, so a worker keeps the files it has read in a bounded
cache: a chat of fifty turns with twenty screenshots reads each from Redis once per worker, not at every turn.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterable

import redis
import redis.asyncio as aioredis

from agent.messages.media import encode
from tasks.store import keys
from tasks.store.replies import text

CACHE_BYTES = 64 * 1024 * 1024  # base64 characters a worker keeps across turns (a file's hash never changes)


class _Cache:
    """Least recently used files by hash, bounded by their total size."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._size = 0
        self._items: OrderedDict[str, str] = OrderedDict()

    def get(self, sha256: str) -> str | None:
        data = self._items.get(sha256)
        if data is not None:
            self._items.move_to_end(sha256)
        return data

    def put(self, sha256: str, data: str) -> None:
        if sha256 in self._items or len(data) > self._most:
            return
        self._items[sha256] = data
        self._size += len(data)
        while self._size > self._most:
            _, dropped = self._items.popitem(last=False)
            self._size -= len(dropped)


_cache = _Cache(CACHE_BYTES)


def encoded(files: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    """The hash fields that keep these files (what `store` writes; the asyncio client writes the same)."""
    return {sha: encode(data) for sha, data in files}


def store(client: redis.Redis, owner_id: str, files: Iterable[tuple[str, bytes]]) -> None:
    """Keep each (sha256, bytes) beside the owner's transcript (a file's hash names its bytes: writing one the
    chat already has changes nothing)."""
    mapping = encoded(files)
    if mapping:
        client.hset(keys.files(owner_id), mapping=mapping)  # type: ignore[arg-type]


async def store_async(client: aioredis.Redis, owner_id: str, files: Iterable[tuple[str, bytes]]) -> None:
    """`store`, for the asyncio client."""
    mapping = encoded(files)
    if mapping:
        await client.hset(keys.files(owner_id), mapping=mapping)  # type: ignore[arg-type]


def read(client: redis.Redis, owner_id: str, sha256: str) -> bytes | None:
    """A file's bytes (what `GET /api/chats/{id}/files/{sha256}` serves), or None."""
    data = client.hget(keys.files(owner_id), sha256)
    return None if data is None else base64.b64decode(text(data))


async def read_async(client: aioredis.Redis, owner_id: str, sha256: str) -> bytes | None:
    """`read`, for the asyncio client."""
    data = await client.hget(keys.files(owner_id), sha256)
    return None if data is None else base64.b64decode(text(data))


class StoredFiles:
    """The `FileSource` of one owner's requests: the store, behind the worker's cache."""

    def __init__(self, client: redis.Redis, owner_id: str) -> None:
        self._client = client
        self._key = keys.files(owner_id)

    def base64(self, sha256: str) -> str | None:
        cached = _cache.get(sha256)
        if cached is not None:
            return cached
        data = self._client.hget(self._key, sha256)
        if data is None:
            return None
        found = text(data)
        _cache.put(sha256, found)
        return found
