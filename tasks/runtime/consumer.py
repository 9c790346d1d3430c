"""The worker's consumer (Celery's `worker_consumer`): Celery's own, recording the messages it refuses
(deadletter.py) and batching the task events Flower reads (task_events.py)."""

from __future__ import annotations

from tasks.runtime.deadletter import DeadLetterConsumer
from tasks.runtime.task_events import BatchedTaskEvents


class WorkerConsumer(BatchedTaskEvents, DeadLetterConsumer):
    """Both: each overrides hooks of its own."""
