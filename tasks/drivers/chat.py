"""The chat-turn driver: one turn of one chat, single-flight per chat, resumable from a stored round."""

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
    name="baton.chat_turn",
    max_retries=None,
    acks_late=True,
    reject_on_worker_lost=True,
    # The unit's record is its result (the client waits on the record and events): a Celery result too cost
    # the worker two round trips per unit (SUCCESS and the guard read before it) that nothing reads.
    ignore_result=True,
    driver=Driver.CHAT_TURN,
)
def chat_turn(self: Task, chat_id: str, turn_id: str) -> dict[str, Any]:
    """Run (or replay, or resume) one chat turn."""
    if not (isinstance(chat_id, str) and keys.ID_PATTERN.match(chat_id)) or not (
        isinstance(turn_id, str) and keys.ID_PATTERN.match(turn_id)
    ):
        reject_invalid(self, f"malformed ids: chat_id={chat_id!r} turn_id={turn_id!r}")
    unit = Unit(Driver.CHAT_TURN, keys.owner("chat", chat_id), turn_id)
    execution = Execution(
        settings, unit, hostname=self.request.hostname or "", task_id=self.request.id, user=message_user(self)
    )
    return execute(self, execution)
