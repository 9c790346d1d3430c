"""A bare `acks_late` task: a liveness probe for operators, and the baseline the benchmarks compare to."""

from __future__ import annotations

from tasks.app import app


@app.task(name="baton.ping", acks_late=True)
def ping() -> str:
    """Answer at once; measures the queue round trip with no Baton machinery."""
    return "pong"
