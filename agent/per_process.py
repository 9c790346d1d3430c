"""One of a thing per process (and key): what a forked pool child must build for itself, never inherit.

A provider's HTTP pool, the live-text writer's and the stop poller's threads, the tool threads: a prefork child
that used its parent's would share its sockets, or wait on threads that were not forked with it. Keyed by pid,
so a child built after the fork finds nothing of its parent's and builds its own on first use; the lock is made
anew in a child, where a parent's thread may have held it at the fork and would never release it there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class PerProcess(Generic[V]):
    def __init__(self) -> None:
        self._made: dict[tuple[int, Hashable], V] = {}
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """This process's one for `key`, made by `make` (under the lock: exactly one is made) if there is none."""
        full = (os.getpid(), key)
        with self._lock:
            found = self._made.get(full)
            if found is None:
                found = self._made[full] = make()
            return found

    def take_mine(self) -> list[V]:
        """Remove and return this process's entries (to close them at its shutdown)."""
        pid = os.getpid()
        with self._lock:
            mine = [key for key in self._made if key[0] == pid]
            return [self._made.pop(key) for key in mine]

    def clear(self) -> None:
        with self._lock:
            self._made.clear()

    def _after_fork(self) -> None:
        # The parent's entries stay (unreachable under their pid): dropping them could run their finalizers, which
        # would close connections the parent still uses over the sockets the child inherited.
        self._lock = threading.Lock()
