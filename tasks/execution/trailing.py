"""The trailing edge of live-text batching: one thread per process writes what every unit's last burst left buffered.

A unit writes its text itself when a delta finds the flush interval over (the leading edge). What a burst leaves
behind in the buffer needs a write once the interval is up, though no delta comes to make it: that is this
thread's job, for all the units of a process. One thread per streaming unit cost nothing at prefork's one unit per
child; a threads pool's hundreds of streaming units made it hundreds of threads.

The thread only keeps a heap of deadlines; the unit decides at its deadline whether anything is left to write
(`Trailing.flush_due`), so a deadline outlived by a write of the unit's own costs one look and no round trip.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import Protocol

log = logging.getLogger("baton.live")


class Trailing(Protocol):
    def flush_due(self) -> None:
        """Write what is buffered if the interval is up (else ask again for later); never raises."""


class TrailingFlusher:
    """The process's one thread that calls `flush_due` on each unit at the deadline it asked for."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._due: list[tuple[float, int, Trailing]] = []
        self._order = itertools.count()  # ties on a deadline go first come first served, never compare units
        self._thread: threading.Thread | None = None

    def at(self, deadline: float, unit: Trailing) -> None:
        """Call `unit.flush_due()` at `deadline` (a `time.monotonic()` reading) or soon after."""
        with self._cv:
            heapq.heappush(self._due, (deadline, next(self._order), unit))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="baton-live-text", daemon=True)
                self._thread.start()
            if self._due[0][2] is unit:
                self._cv.notify()

    def __len__(self) -> int:
        with self._cv:
            return len(self._due)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cv.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, unit = heapq.heappop(self._due)
            try:
                unit.flush_due()
            except Exception:  # the thread must outlive any one unit's write, or every unit's trailing text waits
                log.exception("live text: a trailing flush failed")


_flushers: dict[int, TrailingFlusher] = {}
_flushers_lock = threading.Lock()


def trailing_flusher() -> TrailingFlusher:
    """The process's flusher (keyed by pid: a forked pool child starts its own thread)."""
    with _flushers_lock:
        flusher = _flushers.get(os.getpid())
        if flusher is None:
            flusher = _flushers[os.getpid()] = TrailingFlusher()
        return flusher
