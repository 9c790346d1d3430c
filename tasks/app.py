"""The Celery app, configured from settings; importing it registers both drivers and the drain."""

from __future__ import annotations

from celery import Celery

from config.celeryconfig import celery_config
from config.settings import current

settings = current()
app = Celery("baton")
app.conf.update(celery_config(settings))
app.conf.worker_consumer = "tasks.deadletter:DeadLetterConsumer"

# Registration by import, after the app exists (the task modules import `app` from here).
from tasks import chat, deadletter, drain, health, logs, runs  # noqa: E402, F401
