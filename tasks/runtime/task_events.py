"""Task events (what Flower shows) published in batches over a short window, not one round trip each.

Celery's worker buffers its task events and flushes the buffer at its event loop's next turn: in practice one
PUBLISH for each event, three a task (received, started, succeeded), each a round trip that holds the worker's
event loop, and the first two fall between a task's arrival and its start in a pool child. Flushed
`FLUSH_SECONDS` after the first event the buffer takes, a task's events go in one round trip, and under load
several tasks' together; Flower shows them that much later. The buffer still flushes at once when full (Celery's
`buffer_limit`), and before the worker's consumer shuts down.

Only the prefork pool buffers (Celery buffers where the worker has an event loop); threads, gevent and solo
publish each event as it happens, as before.
"""

from __future__ import annotations

import time
from typing import Any

from celery.worker.consumer import Consumer

FLUSH_SECONDS = 0.1
# A flush scheduled but not run this long after it was due was lost with the loop's timers (a consumer restarted
# after a broker outage): the next event schedules one again, so no event waits for ever.
OVERDUE_SECONDS = 2.0


class BatchedTaskEvents(Consumer):
    """Celery's consumer, flushing buffered task events `FLUSH_SECONDS` after the first rather than at once."""

    _flush_due_at = 0.0  # monotonic time a scheduled flush is due; 0: none scheduled

    def on_send_event_buffered(self) -> None:
        hub: Any = self.hub
        if not hub:
            return
        now = time.monotonic()
        if self._flush_due_at and now < self._flush_due_at + OVERDUE_SECONDS:
            return  # the one scheduled takes this event too
        self._flush_due_at = now + FLUSH_SECONDS
        hub.call_later(FLUSH_SECONDS, self._flush_batched)

    def _flush_batched(self) -> None:
        self._flush_due_at = 0.0
        self._flush_events()

    def shutdown(self) -> None:
        self._flush_batched()  # before Celery's Events step closes the dispatcher with the buffer in it
        super().shutdown()
