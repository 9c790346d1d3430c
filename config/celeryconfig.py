"""The Celery configuration: JSON only, late acks, one message at a time, events on for Flower."""

from __future__ import annotations

from typing import Any

from kombu.serialization import registry

from config.settings import Settings


def forbid_pickle() -> None:
    """Remove pickle from this process's serializers, so Baton cannot even send a pickle message."""
    if "pickle" in registry._encoders:
        registry.unregister("pickle")

# The broker's visibility timeout is a last-resort redelivery, not our recovery path. A run's
# lease (BATON_LEASE_TTL, heartbeated every few seconds) is what detects a lost worker, and the
# recovery sweep requeues the run within ~1.5 lease TTLs. The visibility timeout must therefore
# exceed the longest single execution (a run may work for hours between drains); if it were
# shorter, Redis would hand a *running* task to another worker again and again (celery#5935).
# A stale redelivery after 12 h finds the run finished or leased and does nothing.
VISIBILITY_TIMEOUT_SECONDS = 12 * 3600


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings derived from ours (and pickle removed from the process)."""
    forbid_pickle()
    transport: dict[str, Any] = {"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS}
    return {
        "broker_url": settings.broker,
        "result_backend": settings.redis_url,
        "result_backend_transport_options": {"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
        "broker_transport_options": transport,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "task_track_started": True,
        "task_default_queue": settings.queue,
        "result_expires": 24 * 3600,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }
