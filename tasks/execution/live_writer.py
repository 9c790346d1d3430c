"""Live text's writer: one thread per process writes every streaming unit's buffered text, all in one round trip.

A unit buffers its deltas and asks the writer for a write; the writer gathers the units that asked over
`FLUSH_SECONDS` and sends one pipeline of their fenced writes. At a threads pool's hundreds of streaming units in
one process, a write per unit (or a thread per unit) was a Redis round trip per delta batch in the streaming
threads, each a pass through the GIL: ~1 ms of the worker's CPU per turn of bench.concurrency's 500.

A unit's write is made under its `Fence`'s lock, as `Fence.commit` makes it, so it never passes a commit of the
unit's own: text streamed before an event is in the stream before it. A unit whose fence is busy (it is writing
itself, and that write takes its buffered text) is left for the next round.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import redis

from agent.per_process import PerProcess
from tasks.store.direct import in_one_trip
from tasks.store.fenced import Batch, Fence

log = logging.getLogger("baton.live")


class Buffered(Protocol):
    """A unit's live text as the writer sees it."""

    fence: Fence

    def take(self) -> Batch | None:
        """The buffered commands, emptied out (None: nothing to write, or closed); called under the fence's lock."""

    def again(self) -> None:
        """The unit was skipped (its fence was busy): it is asked about in the next round."""


class LiveWriter:
    """The process's one thread that writes what units buffered, every `interval`, in one pipeline."""

    def __init__(self, client: redis.Redis, *, interval: float) -> None:
        self._client = client
        self._interval = interval
        self._cv = threading.Condition()
        self._asked: dict[int, Buffered] = {}
        self._thread: threading.Thread | None = None

    def ask(self, unit: Buffered) -> None:
        """Write `unit`'s buffer in the next round (within about `interval`)."""
        with self._cv:
            self._asked[id(unit)] = unit
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="baton-live-text", daemon=True)
                self._thread.start()
            self._cv.notify()

    def write_round(self) -> None:
        """One round: every unit that asked, one pipeline (what the thread does each interval)."""
        with self._cv:
            units, self._asked = list(self._asked.values()), {}
        held: list[Fence] = []
        writes: list[tuple[Fence, Batch]] = []
        try:
            for unit in units:
                if not unit.fence.lock.acquire(blocking=False):
                    unit.again()
                    continue
                held.append(unit.fence)
                batch = unit.take()
                if batch:
                    writes.append((unit.fence, batch))
            if not writes:
                return
            try:
                replies = self._send(writes)
            except redis.RedisError as err:
                # The executions' own next writes meet the same error and settle accordingly.
                log.debug("live text not written: %s", err)
                return
            for reply in replies:
                if not reply or isinstance(reply, Exception):
                    # A unit that lost its lease, or whose write failed: its own next write says so.
                    log.debug("live text not written: %s", reply or "the lease is held by another execution")
        finally:
            for fence in held:
                fence.lock.release()

    def _send(self, writes: list[tuple[Fence, Batch]]) -> list[object]:
        """The fences' writes in one round trip, their replies (an error reply as its exception): EVALSHA each, as
        plain commands (a pipeline of script objects asks SCRIPT EXISTS first, a round trip more every `interval`);
        on a cluster straight to each slot's master (a cluster's pipeline would send the whole script, 3 KB, every
        time, for every streaming unit)."""
        return in_one_trip(self._client, [fence.call(batch) for fence, batch in writes])

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._asked:
                    self._cv.wait()
            time.sleep(self._interval)  # gather: the units that ask meanwhile go in the same round
            try:
                self.write_round()
            except Exception:  # the thread must outlive any one round, or every unit's text waits
                log.exception("live text: a write round failed")


_writers: PerProcess[LiveWriter] = PerProcess()


def live_writer(client: redis.Redis, *, interval: float) -> LiveWriter:
    """The process's writer for this client (keyed by pid: a forked pool child starts its own thread)."""
    return _writers.get(id(client), lambda: LiveWriter(client, interval=interval))
