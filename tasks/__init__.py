"""The Celery edge, by concept.

    app.py       the Celery app (drivers and runtime registered through `include`)
    client/      the Python client a web app calls (sync and asyncio), and what it checks before enqueueing
    store/       Redis state: keys, fenced writes, journal and ledger, leases, records, reads
    execution/   one execution of a unit: the flow, how it settles, its wiring and watcher
    drivers/     the Celery tasks (chat turn, coding run, ping) and outcome -> Celery action
    runtime/     the worker around the tasks: drain, sweeps, dead letters, logs
    cli/         the `baton` command line
    demo/        `baton demo`: embedded Redis, local workers, the scenarios

`celery -A tasks worker` finds the app here. It is loaded on first access, so that importing
`tasks.client` (a web app, every CLI call) does not build the worker's app and its drivers.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from tasks.app import app

        return app
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
