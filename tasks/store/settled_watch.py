"""One reader of the settled signals for every `AsyncClient.wait` in flight.

A `wait` blocks until its unit's owner writes a settled entry. Each `wait` doing its own XREAD BLOCK held one
store connection per waiter, and each waiter paid a connection's setup and a round trip every quiet second:
200 turns awaited at once opened 200 connections within a few loop iterations and parsed 200 replies a second,
which held the event loop for tens of milliseconds at a time. Here one task reads the settled streams of all
waiters with one XREAD on one connection and hands each waiter the entries after its own position.

A waiter whose stream is not in the XREAD being blocked on is added by unblocking that XREAD (CLIENT UNBLOCK,
from another connection); the reader then reads again with the new stream in. Should that miss (the XREAD not
yet blocked at the server, or its connection replaced), the waiter loses nothing: it reads its record after
each quiet second anyway (`tasks.client.core.settled_news`), and the reader takes its stream in at its next read.

On a Redis Cluster one XREAD reads the streams of one slot only, and CLIENT UNBLOCK must reach the node the XREAD
waits on: there each waiter reads its own stream (`OwnReads`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import redis.asyncio as aioredis
from redis.typing import KeyT, StreamIdT

from tasks.store.replies import Entry, read_streams
from tasks.store.xread import axread

BLOCK_MS = 5_000  # one XREAD BLOCK of the reader; a new waiter's stream unblocks it sooner
COUNT = 100  # entries per stream per read
UNBLOCK_TRIES = 20  # CLIENT UNBLOCK found nothing blocked: the XREAD is on its way; try again this many times
UNBLOCK_PAUSE = 0.002


def position(stream_id: str) -> tuple[int, int]:
    """A stream id as a comparable (milliseconds, sequence)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Subscription:
    """One waiter's view of one settled stream: the entries after its position, as they come."""

    def __init__(self, watch: SettledWatch, key: str, after: str) -> None:
        self.key = key
        self.after = after
        self._watch = watch
        self._entries: list[Entry] = []
        self._error: BaseException | None = None
        self._news = asyncio.Event()

    def deliver(self, entries: list[Entry]) -> None:
        mine = [e for e in entries if position(e[0]) > position(self.after)]
        if mine:
            self._entries.extend(mine)
            self.after = mine[-1][0]
            self._news.set()

    def fail(self, err: BaseException) -> None:
        self._error = err
        self._news.set()

    async def next(self, timeout: float) -> list[Entry]:
        """The entries delivered since the last call, waiting up to `timeout` seconds for one; [] if none came.
        A store error of the reader is raised here."""
        if not self._news.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._news.wait()
        if self._error is not None:
            raise self._error
        self._news.clear()
        found, self._entries = self._entries, []
        return found

    def close(self) -> None:
        self._watch.unsubscribe(self)


class SettledWatch:
    """The settled streams of one client's waiters, read by one task on one connection of `store`."""

    def __init__(self, store: aioredis.Redis, errors: tuple[type[BaseException], ...]) -> None:
        self._store = store
        self._errors = errors  # what ends the reader and is handed to every waiter
        self._subs: dict[str, set[Subscription]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._reader_id: int | None = None
        self._reading: frozenset[str] = frozenset()  # the streams of the XREAD in flight, if one is
        self._reads = 0  # XREADs issued
        self._next_read = asyncio.Event()  # set (and replaced) as each read is issued
        self._kick: asyncio.Task[None] | None = None

    def subscribe(self, key: str, after: str) -> Subscription:
        sub = Subscription(self, key, after)
        self._subs.setdefault(key, set()).add(sub)
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read(), name="baton-settled-watch")
        elif self._missing() and (self._kick is None or self._kick.done()):
            self._kick = asyncio.get_running_loop().create_task(self._unblock(), name="baton-settled-unblock")
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.key]

    async def aclose(self) -> None:
        for task in (self._kick, self._reader):  # a cancelled XREAD's connection is dropped, not reused
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _streams(self) -> dict[str, str]:
        """Each watched stream and the earliest position among its waiters."""
        return {key: min((s.after for s in subs), key=position) for key, subs in self._subs.items()}

    async def _read(self) -> None:
        conn = self._store.client()  # holds one connection of the pool for as long as it reads
        try:
            while self._subs:
                if self._reader_id is None:
                    self._reader_id = int(await conn.client_id())
                streams = self._streams()
                self._reading = frozenset(streams)
                self._reads += 1
                self._issued()
                try:
                    found = await conn.xread(cast(dict[KeyT, StreamIdT], streams), block=BLOCK_MS, count=COUNT)
                finally:
                    self._reading = frozenset()
                for key, entries in read_streams(found or []):
                    for sub in list(self._subs.get(key, ())):
                        sub.deliver(entries)
        except self._errors as err:
            for subs in self._subs.values():
                for sub in subs:
                    sub.fail(err)
        finally:
            # Before any await: a waiter that subscribes from here on starts a reader of its own.
            self._reader = None
            self._reader_id = None
            self._issued()
            with contextlib.suppress(*self._errors):
                await conn.aclose()

    def _missing(self) -> bool:
        """Whether the XREAD in flight leaves out a stream that now has a waiter."""
        return bool(self._reading) and any(key not in self._reading for key in self._subs)

    def _issued(self) -> None:
        """A read is issued, or the reader ended: whoever waited for the next one looks again."""
        self._next_read.set()
        self._next_read = asyncio.Event()

    async def _unblock(self) -> None:
        """Unblock the reader's XREAD while it leaves out a waiter's stream, so that it reads again with it in."""
        misses = 0
        while self._missing() and self._reader_id is not None and misses < UNBLOCK_TRIES:
            read, next_read = self._reads, self._next_read
            try:
                hit = await self._store.client_unblock(self._reader_id)
            except self._errors:
                return  # the reader meets the same store and says so; waiters fall back on their quiet second
            if hit or self._reads != read:
                await next_read.wait()  # that read ends; the next one takes the streams in (or misses a newer one)
                continue
            misses += 1  # nothing blocked: the XREAD is on its way to the server, or its reply on its way back
            await asyncio.sleep(UNBLOCK_PAUSE)
        if self._missing():
            self._reader_id = None  # perhaps a reconnected connection with another id: asked again next read


class OwnRead:
    """A waiter's own read of its settled stream (`SubscriptionLike`): each `next` is one XREAD BLOCK of its key."""

    def __init__(self, store: aioredis.Redis, key: str, after: str) -> None:
        self.key = key
        self.after = after
        self._store = store

    async def next(self, timeout: float) -> list[Entry]:
        found = await axread(self._store, {self.key: self.after}, block=max(1, int(timeout * 1000)), count=COUNT)
        entries = [entry for _, read in read_streams(found or []) for entry in read]
        if entries:
            self.after = entries[-1][0]
        return entries

    def close(self) -> None:
        pass


class OwnReads:
    """The waits of a Redis Cluster: each waiter reads its own stream with its own XREAD, one connection each.

    One XREAD reads the streams of one slot only, and CLIENT UNBLOCK must reach the node the read blocks on; a
    reader per slot restarted for each new stream meant cancelling XREADs in flight, which redis-py's asyncio
    cluster client does not survive under load (a connection cancelled while it connected was handed out again
    half made). A waiter's read blocks at most a second, as the shared reader's waiters look at their record."""

    def __init__(self, store: aioredis.Redis, errors: tuple[type[BaseException], ...]) -> None:
        self._store = store

    def subscribe(self, key: str, after: str) -> OwnRead:
        return OwnRead(self._store, key, after)

    async def aclose(self) -> None:
        pass
