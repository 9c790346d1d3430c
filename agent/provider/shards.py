"""SDK clients in shards, each calling thread keeping to one: what every HTTP provider holds.

An SDK client is a connection pool of its own, and the pool's bookkeeping walks all its connections and requests
on every request and every close: one pool for hundreds of streams in flight made each request pay for all the
others. So a provider holds `count` clients, built on first use under a lock (building one may fail, for want of
credentials: that failure is the provider's to raise, before any attempt is made), and each thread is given one
shard, round robin, for its life.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")


class Shards(Generic[C]):
    def __init__(self, make: Callable[[], C], count: int = 1, given: C | None = None) -> None:
        """`make` builds one client; `given`, a client made by the caller (a test's), is the only shard."""
        self._make = make
        self._clients: list[C | None] = [given] if given is not None else [None] * max(1, count)
        self._lock = threading.Lock()
        self._next = itertools.count()
        self._mine = threading.local()  # this thread's shard

    def get(self) -> C:
        """This thread's client, built now if its shard has none yet."""
        shard: int | None = getattr(self._mine, "shard", None)
        if shard is None:
            shard = self._mine.shard = next(self._next) % len(self._clients)
        client = self._clients[shard]
        if client is None:
            with self._lock:
                client = self._clients[shard]
                if client is None:
                    client = self._clients[shard] = self._make()
        return client
