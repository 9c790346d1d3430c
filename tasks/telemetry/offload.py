"""The SDK's work for what nothing runs under, done off the unit's thread: a leaf span made and ended, a measurement
recorded.

An attempt's `chat MODEL` and a tool call's `execute_tool TOOL` are leaves: once they end, everything about them is
known, and making them is the SDK's own work (ids, sampler, attribute checks, the span processor's copy, each
histogram's attribute hashing): about 0.3 ms of a short turn's CPU on the unit's thread, where the turn waits for it
(bench/otel.py). Here the unit's thread hands a closure over (a deque append), and a thread of the process makes
them every `INTERVAL`, in the gaps the unit leaves while it waits on the provider and the store. Nothing is lost that
the SDK would have kept: a flush (a child's exit, `switch.shutdown`) makes what is waiting first; a process killed
-9 loses them as it loses the batch exporter's queue.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("baton.telemetry")

INTERVAL = 0.05  # s between rounds: a span waits at most this long before the batch exporter's queue has it


class Offload:
    def __init__(self, interval: float = INTERVAL) -> None:
        self._interval = interval
        self._waiting: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._pid = 0  # the process whose thread runs the rounds: a forked child starts its own

    def submit(self, work: Callable[[], None]) -> None:
        if self._pid != os.getpid():
            self._start()
        self._waiting.append(work)

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._waiting = deque()  # a parent's leftovers are its own to make
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="baton-telemetry", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self._interval)
            self.flush()

    def flush(self) -> None:
        """Do everything submitted so far, on the calling thread."""
        while True:
            try:
                work = self._waiting.popleft()
            except IndexError:
                return
            try:
                work()
            except Exception:  # one span's trouble must not stop the rest
                log.exception("telemetry: a span or measurement could not be made")


OFFLOAD = Offload()
