"""A per-window request limit for the fake API servers, and the rate-limit headers each API sends with it.

Pure and thread-safe: the servers (fake_anthropic.py, fake_openai.py) ask `take()` for each request that reached
the model and answer 429 with `retry-after` when it says no, and put the limit's headers on every answer. A
fixed window (the first request opens it, `window` seconds long) is enough to show a fleet that shares what the
headers say from one whose every worker finds out on its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class Taken:
    """One request's verdict: admitted or not, what remains of the window, when it resets (Unix time)."""

    admitted: bool
    limit: int
    remaining: int
    reset_at: float

    def retry_after(self, now: float) -> int:
        """Whole seconds until the window resets, as the APIs send `retry-after` (at least 1)."""
        return max(1, math.ceil(self.reset_at - now))


class FixedWindow:
    """At most `limit` requests in each window of `window` seconds."""

    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._start = -math.inf
        self._count = 0
        self._lock = threading.Lock()

    def take(self) -> Taken:
        with self._lock:
            now = self._clock()
            if now >= self._start + self.window:
                self._start, self._count = now, 0
            admitted = self._count < self.limit
            if admitted:
                self._count += 1
            return Taken(admitted, self.limit, self.limit - self._count, self._start + self.window)


def anthropic_headers(taken: Taken) -> dict[str, str]:
    """`anthropic-ratelimit-requests-*`: the reset an RFC 3339 time in whole seconds, rounded up as the API's is."""
    reset = datetime.fromtimestamp(math.ceil(taken.reset_at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "anthropic-ratelimit-requests-limit": str(taken.limit),
        "anthropic-ratelimit-requests-remaining": str(taken.remaining),
        "anthropic-ratelimit-requests-reset": reset,
    }


def openai_headers(taken: Taken, now: float) -> dict[str, str]:
    """`x-ratelimit-*-requests`: the reset a duration, as OpenAI writes it (`1m0.5s`, `850ms`)."""
    return {
        "x-ratelimit-limit-requests": str(taken.limit),
        "x-ratelimit-remaining-requests": str(taken.remaining),
        "x-ratelimit-reset-requests": go_duration(max(0.0, taken.reset_at - now)),
    }


def go_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}s" if minutes else f"{rest:.3f}s"


def most_in_window(times: Sequence[float], window: float) -> int:
    """The most of `times` that fall in any `window` seconds (both ends included)."""
    ordered = sorted(times)
    best, first = 0, 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] > window:
            first += 1
        best = max(best, last - first + 1)
    return best
