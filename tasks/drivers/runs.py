"""The coding-run driver: a long autonomous run in a workspace, journaled step by step."""

from __future__ import annotations

from typing import Any

from celery import Task

from agent.loop.policy import Driver
from tasks.app import app, settings
from tasks.drivers.acting import execute, message_user, reject_invalid
from tasks.execution.flow import Execution, Unit
from tasks.store import keys


@app.task(
    bind=True,
    name="baton.coding_run",
    max_retries=None,
    acks_late=True,
    reject_on_worker_lost=True,
    # The unit's record is its result (the client waits on the record and events): a Celery result too cost
    # the worker two round trips per unit (SUCCESS and the guard read before it) that nothing reads.
    ignore_result=True,
    driver=Driver.CODING_RUN,
)
def coding_run(self: Task, run_id: str) -> dict[str, Any]:
    """Run (or replay after an interruption) one coding run."""
    if not (isinstance(run_id, str) and keys.ID_PATTERN.match(run_id)):
        reject_invalid(self, f"malformed run id: {run_id!r}")
    unit = Unit(Driver.CODING_RUN, keys.owner("run", run_id), run_id)
    execution = Execution(
        settings, unit, hostname=self.request.hostname or "", task_id=self.request.id, user=message_user(self)
    )
    return execute(self, execution)
