"""The Celery app, configured from settings.

The drivers and the worker's runtime register through Celery's own `include`, imported when a worker
starts; this module imports none of them, so they can import `app` from here without a circle.
"""

from __future__ import annotations

from celery import Celery

from config.celeryconfig import celery_config
from config.settings import current
from config.topology import celery_amqp
from tasks.runtime.gevent_compat import cooperative_retry_waits, keep_trio_out_under_gevent

# Before the SDK is imported by anything of the worker's, and before the consumer first reconnects (the module says
# why).
keep_trio_out_under_gevent()
cooperative_retry_waits()

# What a worker imports at start: the task drivers, and the runtime hooked to worker signals.
INCLUDE = [
    "tasks.drivers.chat",
    "tasks.drivers.runs",
    "tasks.drivers.health",
    "tasks.runtime.logs",
    "tasks.runtime.drain",
    "tasks.runtime.deadletter",
    "tasks.runtime.kombu_fixes",
    "tasks.runtime.heap",
    "tasks.telemetry.celery_signals",
]

settings = current()
app = Celery("baton", include=INCLUDE, amqp=celery_amqp(settings.broker))
app.conf.update(celery_config(settings))
app.conf.worker_consumer = "tasks.runtime.consumer:WorkerConsumer"
