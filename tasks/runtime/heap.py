"""A worker's long-lived heap kept out of the garbage collector's full passes (`gc.freeze`).

What a worker holds for its whole life (its modules, pydantic's schemas, the SDK and its clients, the connection
pools: ~240,000 objects in a pool child) was walked by every full collection, ~110 ms each. A turn on a long chat
reads its every message, and the objects it makes set one off in about one turn of twelve at 1,000 earlier messages
(9 ms of a turn's CPU on average, and the 90th percentile of a turn 100 ms instead of 25). Frozen, those objects
are never walked again; their reference counts still free them, so only a reference cycle among them is kept.
`baton serve` freezes its startup heap for the same reason (web/app.py).

Python's advice for a process that forks: collect and freeze in the parent right before the fork, and the children
share its pages rather than copy each one a collection touches. Then each process freezes what its start built
after that: the parent once it is ready, and a pool child after its first unit (the SDK that unit imported and its
clients). A threads or gevent pool runs its first units side by side, and freezing then would keep the cycles of
those still running: its units run in the parent, frozen at ready. bench/RESULTS.md, stop 56.
"""

from __future__ import annotations

import gc
from typing import Any

from celery import signals

_child = [False]  # this process is a prefork pool's child: it runs one unit at a time
_units_ended = [0]


@signals.worker_init.connect
def _before_the_pool_forks(**_: Any) -> None:
    gc.collect()  # nothing unreachable is frozen
    gc.freeze()


@signals.worker_ready.connect
def _once_ready(**_: Any) -> None:
    gc.freeze()  # the consumer, the pool and its timers, built since


@signals.worker_process_init.connect
def _in_a_pool_child(**_: Any) -> None:
    _child[0] = True


@signals.task_postrun.connect
def _after_the_first_unit(**_: Any) -> None:
    _units_ended[0] += 1
    if _child[0] and _units_ended[0] == 1:
        gc.freeze()  # what the first unit built to last: the provider's SDK, its clients, the agents' tools
