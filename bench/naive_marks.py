"""The naive loop's app (`bench.naive_app`, unchanged) with `bench.arrivals`' marks, for `bench.turn_phases`: when
its worker's main process received each task, when the pool child started it, and when its result was written
(`task_success`, sent right after the result backend's write, which is what wakes the client's `.get()`).

Started as `NAIVE_APP=bench.naive_marks` (`bench.naive_loop.NaiveWorker`).
"""

from __future__ import annotations

from typing import Any

from celery import signals

from bench import arrivals
from bench.naive_app import app, turn

__all__ = ["app", "turn"]


def _written(**_: Any) -> None:
    arrivals.mark("written")


arrivals.track()
signals.task_success.connect(_written, weak=False)
