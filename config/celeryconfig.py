"""The Celery configuration: JSON only, late acks, one message at a time, events on for Flower."""

from __future__ import annotations

from typing import Any

from kombu.serialization import registry

from config.settings import Settings


def forbid_pickle() -> None:
    """Remove pickle from this process's serializers, so Baton cannot even send a pickle message."""
    if "pickle" in registry._encoders:
        registry.unregister("pickle")

# Two recovery paths. A *running* unit's lease (BATON_LEASE_TTL, heartbeated) detects a lost
# worker, and the recovery sweep requeues it within ~1.5 lease TTLs. A message a lost worker held
# *before* its unit ran (a deferred chat turn's ETA copy, a reserved message, a requeue published
# after the unit left the active set) is in no active set: only the broker's visibility timeout
# brings it back, so it must be short (the chaos bench lost such turns for 12 h). Redelivering a
# message whose unit is still running is harmless (celery#5935 is defused by the lease): the copy
# finds the lease held by its own unit and is dropped, or finds the unit finished. It must exceed
# the longest time a live worker holds a message before running it (countdowns here are <= 8 s).
VISIBILITY_TIMEOUT_SECONDS = 60
# How often each worker scans for messages past the visibility timeout (kombu's default is ~100 s).
UNACKED_RESTORE_SECONDS = 5


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings derived from ours (and pickle removed from the process)."""
    forbid_pickle()
    transport: dict[str, Any] = {
        "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
        "unacked_restore_interval": UNACKED_RESTORE_SECONDS,
        "unacked_restore_throttle": 1,
    }
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
