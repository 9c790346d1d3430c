"""Task events flushed in batches: one flush scheduled per window, rescheduled when lost, run before shutdown."""

from __future__ import annotations

from typing import Any

import pytest

from tasks.runtime import task_events
from tasks.runtime.task_events import FLUSH_SECONDS, OVERDUE_SECONDS, BatchedTaskEvents


class Hub:
    """The event loop's timer, by hand: what was scheduled, run when the test says."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Any) -> None:
        self.later.append((delay, callback))

    def run_due(self) -> None:
        due, self.later = self.later, []
        for _, callback in due:
            callback()


class Consumer(BatchedTaskEvents):
    def __init__(self, hub: Hub | None) -> None:  # not Celery's: only what the mixin touches
        self.hub = hub
        self.flushes = 0

    def _flush_events(self) -> None:
        self.flushes += 1


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(task_events.time, "monotonic", lambda: now[0])
    return now


def test_the_events_of_one_window_are_flushed_once_after_it(clock):
    hub = Hub()
    consumer = Consumer(hub)
    for _ in range(3):  # received, started, succeeded
        consumer.on_send_event_buffered()
    assert [delay for delay, _ in hub.later] == [FLUSH_SECONDS] and consumer.flushes == 0
    hub.run_due()
    assert consumer.flushes == 1
    consumer.on_send_event_buffered()  # the next window schedules its own
    assert len(hub.later) == 1


def test_a_flush_lost_with_the_loops_timers_is_scheduled_again(clock):
    hub = Hub()
    consumer = Consumer(hub)
    consumer.on_send_event_buffered()
    hub.later.clear()  # a consumer restarted after a broker outage: its loop's timers are gone
    clock[0] += FLUSH_SECONDS + OVERDUE_SECONDS / 2
    consumer.on_send_event_buffered()
    assert hub.later == []  # not yet overdue: still waits for the first
    clock[0] += OVERDUE_SECONDS
    consumer.on_send_event_buffered()
    assert len(hub.later) == 1
    hub.run_due()
    assert consumer.flushes == 1


def test_shutdown_flushes_what_is_buffered_first(monkeypatch):
    order: list[str] = []
    consumer = Consumer(Hub())
    monkeypatch.setattr(consumer, "_flush_events", lambda: order.append("flush"))
    monkeypatch.setattr(task_events.Consumer, "shutdown", lambda self: order.append("shutdown"))
    consumer.shutdown()
    assert order == ["flush", "shutdown"]


def test_without_an_event_loop_nothing_is_scheduled():
    """Threads, gevent and solo pools: Celery does not buffer there, and this does not either."""
    consumer = Consumer(None)
    consumer.on_send_event_buffered()
    assert consumer.flushes == 0
