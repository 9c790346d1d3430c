"""Threads for tool calls, started once and reused: a turn's tool call no longer pays for a thread's start.

A call runs off the caller's thread so that a stop or drain can abandon it (`tool_round._run_cancellable`).
Starting a thread per call cost about a tenth of a millisecond, a tool round's largest fixed cost after its
journal writes. Here an idle thread takes the next call; a new one is started only when none is idle, so a
tool that hangs after being abandoned holds its own thread and never delays another call. The threads are
daemons, as the per-call ones were: a hung tool must not keep a worker process from exiting. `concurrent.futures`
does not fit: its pool has a ceiling, which hung tools would fill, and it joins its threads at exit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent.per_process import PerProcess

IDLE_KEPT = 8  # idle threads kept per process; a burst beyond them ends its extra threads when it is over

Job = Callable[[], None]
Slot = list[tuple[Job, str]]  # where a parked thread finds its next job and the name to run it under
log = logging.getLogger(__name__)


class ToolThreads:
    def __init__(self, idle_kept: int = IDLE_KEPT) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[threading.Event, Slot]] = []  # each parked thread's wake-up and slot
        self._idle_kept = idle_kept
        self.started = 0  # threads started so far (what the tests count)

    def run(self, job: Job, name: str = "baton-tool") -> None:
        """Run `job` on an idle thread, or on a new one if none is idle; return at once. The thread takes `name`
        for the job's time (what a log line or a stack dump of a hung tool shows)."""
        with self._lock:
            parked = self._idle.pop() if self._idle else None
        if parked is not None:
            wake, slot = parked
            slot.append((job, name))
            wake.set()
            return
        with self._lock:
            self.started += 1
        threading.Thread(target=self._serve, args=(job, name), name=name, daemon=True).start()

    def _serve(self, job: Job, name: str) -> None:
        wake, slot = threading.Event(), Slot()
        me = threading.current_thread()
        while True:
            me.name = name
            try:
                job()
            except BaseException:  # a job reports through its own result; this thread must serve the next one
                log.exception("a tool thread's job raised")
            me.name = "baton-tool"
            with self._lock:
                if len(self._idle) >= self._idle_kept:
                    return
                wake.clear()
                self._idle.append((wake, slot))
            wake.wait()
            job, name = slot.pop()


_threads: PerProcess[ToolThreads] = PerProcess()


def tool_threads() -> ToolThreads:
    """This process's threads (a forked pool child starts its own: its parent's are not there)."""
    return _threads.get(None, ToolThreads)
