"""The SDK's life in a worker, and the sender's context around each task: wired to Celery's signals.

A prefork child sets the SDK up after its fork (`worker_process_init`: the batch exporter's thread and the HTTP
exporter's sockets are its own) and flushes it as it exits (`worker_process_shutdown`: a recycled child would lose
the spans still batched). A pool that runs its units in the worker's own process (solo, threads, gevent) sets it up
in `worker_init` and flushes it in `worker_shutdown`. Without the `OTEL_*` variables each is a dictionary lookup.
"""

from __future__ import annotations

from typing import Any

from celery import signals
from celery.concurrency import get_implementation

from tasks.telemetry import propagation, switch

SERVICE = "baton-worker"
_tokens: dict[str, object] = {}


def _runs_in_children(worker: Any) -> bool:
    """Whether the worker's pool runs units in forked children (prefork), which set the SDK up themselves."""
    pool = get_implementation(getattr(worker, "pool_cls", None) or worker.app.conf.worker_pool)
    return "prefork" in getattr(pool, "__module__", "")


@signals.worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    if not _runs_in_children(sender):
        switch.configure(SERVICE)


@signals.worker_process_init.connect
def _on_child_start(**_: Any) -> None:
    switch.configure(SERVICE)


@signals.worker_process_shutdown.connect
def _on_child_exit(**_: Any) -> None:
    switch.shutdown()


@signals.worker_shutdown.connect
def _on_worker_exit(**_: Any) -> None:
    switch.shutdown()


@signals.task_prerun.connect
def _on_task_start(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if switch.on() and task is not None and task_id is not None:
        token = propagation.attach(task.request)
        if token is not None:
            _tokens[task_id] = token


@signals.task_postrun.connect
def _on_task_end(task_id: str | None = None, **_: Any) -> None:
    if _tokens and task_id is not None:
        propagation.detach(_tokens.pop(task_id, None))
