"""A cancellation token shared by the loop, the provider stream and the tool runner.

The edge (a Celery task) sets it from a watcher thread; the core only reads it, so a stop or a
drain reaches a stalled stream or a blocked tool without the core knowing where it came from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.errors import Cancelled, CancelReason


class CancelToken:
    """Set once with a reason; callbacks registered while it is unset run when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: CancelReason | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._look: Callable[[], None] | None = None

    def look_with(self, look: Callable[[], None]) -> None:
        """What `look()` asks: the edge's read of its stop and drain flags (which cancels this token if set)."""
        self._look = look

    def look(self) -> None:
        """Ask the flags now instead of at the watcher's next poll (the loop does, after a round of tools: a stop
        that came while a tool ran would otherwise miss the next model step, as fast as a step is)."""
        if self._look is not None and not self._event.is_set():
            self._look()

    @property
    def reason(self) -> CancelReason | None:
        return self._reason

    def is_set(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: CancelReason) -> None:
        """Request cancellation; the first reason wins, later calls are no-ops."""
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def raise_if_set(self) -> None:
        """Raise `Cancelled` when cancellation was requested."""
        if self._reason is not None:
            raise Cancelled(self._reason)

    def wait(self, timeout: float | None) -> bool:
        """Block until cancelled or the timeout passes; True when cancelled."""
        return self._event.wait(timeout)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` on cancellation (at once if already cancelled); returns an unregister function."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
