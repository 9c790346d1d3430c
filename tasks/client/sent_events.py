"""Flower's task-sent event, built only while something hears it.

Celery's task-sent event (what lets Flower list a task before a worker has received it) costs each send ~0.15 to 0.2 ms
of Python to build, and goes out on Redis pub/sub, where an event no subscriber hears is dropped by the server. Every
event receiver (Flower, `celery events`) subscribes to the events' pattern, so on a Redis broker the event's PUBLISH
(run by the enqueue script, or sent in kombu's batch) says how many heard it. While none did, sends leave it out,
and one send at most every `RECHECK_SECONDS` builds it again to learn whether a receiver has come. A receiver that
comes misses the task-sent events of the sends before that check: it lists those tasks from their `task-received`
on, as it lists every task sent before it came.
"""

from __future__ import annotations

from dataclasses import dataclass

RECHECK_SECONDS = 1.0


@dataclass
class SentEvents:
    """What the last task-sent event published told (shared by a client's threads: a race only builds one more)."""

    heard_by: int | None = None  # how many received the last one published (None: none published yet)
    at: float = 0.0  # when, by `time.monotonic`

    def wanted(self, now: float) -> bool:
        """Whether a send at `now` builds the event: unless the last one reached nobody less than
        `RECHECK_SECONDS` ago."""
        return self.heard_by != 0 or now - self.at >= RECHECK_SECONDS

    def heard(self, receivers: int, now: float) -> None:
        """The event a send built was published at `now` and reached `receivers` subscribers."""
        self.heard_by, self.at = receivers, now
