"""When a turn's task reached each process of a worker, by the wall clock (`bench.turn_phases`'s critical path).

A benchmark worker's module connects these to Celery's signals (`track`): `received` in the worker's main process
as the consumer takes the message (`task_received`), `started` in the pool child as the task begins
(`task_prerun`); each appends `<kind> <unix time>` to the file `BATON_BENCH_ARRIVALS` names. One machine, one
clock: the client's own stamps compare with them. `mark` adds a kind of the caller's (when the answer was written).
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import signals

VARIABLE = "BATON_BENCH_ARRIVALS"


def mark(kind: str) -> None:
    """Append `kind` and the time now (a few lines a turn, each one short `write` in append mode)."""
    path = os.environ.get(VARIABLE)
    if path:
        with open(path, "a") as out:
            out.write(f"{kind} {time.time():.6f}\n")


def _received(**_: Any) -> None:
    mark("received")


def _started(**_: Any) -> None:
    mark("started")


def track() -> None:
    """Mark every task's arrival in the main process and its start in the pool child (a no-op without the file)."""
    if os.environ.get(VARIABLE):
        signals.task_received.connect(_received, weak=False)
        signals.task_prerun.connect(_started, weak=False)
