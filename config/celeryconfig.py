"""The Celery configuration: JSON only, late acks, one message at a time, events on for Flower."""

from __future__ import annotations

from typing import Any

from kombu.serialization import registry

from config.settings import Settings
from config.topology import broker_kind, work_queue


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
    conf: dict[str, Any] = {
        "broker_url": settings.broker,
        "result_backend": settings.result_backend,
        "result_backend_transport_options": {
            "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
            **sentinel_options(settings),
        },
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
        # No STARTED state in the result backend: it cost a read and a MULTI/SETEX/PUBLISH/EXEC (two round trips)
        # before every task body, and nothing reads it. The unit's record says `running`, and Flower learns that a
        # task started from its task-started event, which stays.
        "task_track_started": False,
        "task_default_queue": settings.queue,
        "result_expires": 24 * 3600,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        # A result write that fails with the store down fails "outside the body": once (with the STARTED state,
        # since dropped) the message was acknowledged and its unit never run (with RabbitMQ as the broker,
        # workers keep receiving messages through a Redis outage). Retried instead, for up to ~2 min.
        "result_backend_always_retry": True,
        "result_backend_max_retries": 20,
    }
    conf.update(amqp_options(settings) if broker_kind(settings.broker) == "amqp" else redis_options(settings))
    return conf


def sentinel_options(settings: Settings) -> dict[str, Any]:
    """The transport options a `sentinel://` URL needs: which master the Sentinels are asked for."""
    return {"master_name": settings.redis_master} if settings.sentinels else {}


def redis_options(settings: Settings) -> dict[str, Any]:
    """The Redis transport: a visibility timeout (its only redelivery) and a frequent restore sweep."""
    transport: dict[str, Any] = {
        "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
        "unacked_restore_interval": UNACKED_RESTORE_SECONDS,
        "unacked_restore_throttle": 1,
    }
    if settings.broker.startswith("sentinel://"):
        transport.update(sentinel_options(settings))
    return {"broker_transport_options": transport}


def amqp_options(settings: Settings) -> dict[str, Any]:
    """RabbitMQ, as Celery documents it for quorum queues (5.5+).

    No visibility timeout exists here: an unacknowledged message comes back when its consumer's channel
    closes (a worker lost, or the broker's `consumer_timeout`). A channel the broker closes is a channel error,
    not a connection error: without `broker_channel_error_retry` the consumer dies with "Unrecoverable error"
    (celery#6760) and the worker exits; with it the consumer reconnects and goes on, and the copy the broker
    redelivered meanwhile is turned away by the unit's lease (or its finished record).
    """
    return {
        "task_queues": [work_queue(settings.queue)],
        "task_default_queue_type": "quorum",
        "task_default_exchange_type": "topic",
        "task_create_missing_queue_type": "quorum",
        "worker_detect_quorum_queues": True,  # per-consumer prefetch: quorum queues refuse global QoS
        "broker_native_delayed_delivery_queue_type": "quorum",
        "broker_channel_error_retry": True,
        "broker_transport_options": {"confirm_publish": True},  # a publish returns once the broker has it
    }
