"""The command line of a local `celery -A tasks worker`, shared by `baton demo` and the test harness."""

from __future__ import annotations

import sys


def worker_command(queue: str, node: str, *, concurrency: int = 2, pool: str | None = None) -> list[str]:
    """A worker on one queue, named `node`; mingle and gossip off, since local workers need neither.

    `pool`: Celery's execution pool (`prefork`, `threads`, `gevent`); None keeps Celery's default (prefork).
    """
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tasks",
        "worker",
        "-Q",
        queue,
        "-n",
        node,
        "-c",
        str(concurrency),
        "-l",
        "info",
        "--without-mingle",
        "--without-gossip",
        *(["-P", pool] if pool else []),
    ]
