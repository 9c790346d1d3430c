"""The drain and the recovery sweep, wired to the worker's signals.

Drain: on `worker_shutting_down` (main process, at once on SIGTERM's warm shutdown) we set a
Redis flag for this worker; each executing unit's watcher sees it within ~0.5 s, aborts its
stream or lets its tool settle, checkpoints and requeues itself with `Task.retry` (a RETRY in
Flower, reason `PlatformInterrupt`). The warm shutdown then finds nothing running and exits.

Sweep: a thread in each worker's main process finds units whose lease expired while they were
running (their worker was SIGKILLed or lost) and requeues them, counted as interruptions.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

from celery import signals

from agent.errors import ToolDefinitionError, ToolLoadError
from tasks.app import app, settings
from tasks.execution import wiring
from tasks.runtime.live_trim import trim_live_text
from tasks.runtime.sweeper import pending_check_seconds, sweep_lost_messages, sweep_once
from tasks.store import keys

log = logging.getLogger("baton.drain")

DRAIN_FLAG_TTL_S = 300
_sweeper_halt = threading.Event()


@signals.worker_shutting_down.connect
def _on_shutting_down(sender: Any = None, sig: Any = None, how: Any = None, **_: Any) -> None:
    hostname = str(sender)
    try:
        wiring.redis_client(settings.redis_url).set(keys.drain(hostname), str(time.time()), ex=DRAIN_FLAG_TTL_S)
        log.info("drain: %s is shutting down (%s %s); running units will checkpoint and requeue", hostname, how, sig)
    except Exception:  # a shutdown must go on even if Redis is gone
        log.exception("drain: could not set the drain flag for %s", hostname)
    _sweeper_halt.set()


@signals.worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    hostname = getattr(sender, "hostname", None) or str(sender)
    client = wiring.redis_client(settings.redis_url)
    client.delete(keys.drain(hostname))
    interval = min(2.0, settings.lease_ttl / 4)
    # Lost broker messages can be looked for only in a Redis broker (an AMQP broker does not lose them this way).
    broker = wiring.redis_client(settings.broker) if settings.broker.startswith(("redis", "unix")) else None

    def loop() -> None:
        next_lost_check = time.monotonic() + pending_check_seconds(settings) / 2
        while not _sweeper_halt.wait(interval):
            try:
                for owner_id in sweep_once(client, app, settings):
                    log.warning("recovered %s: its worker was lost; requeued", owner_id)
                trim_live_text(client, time.time())
                if broker is not None and time.monotonic() >= next_lost_check:
                    next_lost_check = time.monotonic() + pending_check_seconds(settings) / 2
                    for owner_id in sweep_lost_messages(client, broker, app, settings):
                        log.warning("republished %s: the broker lost its message before it started", owner_id)
            except Exception:
                log.exception("recovery sweep failed; trying again")

    threading.Thread(target=loop, name="baton-sweeper", daemon=True).start()


@signals.worker_init.connect
def _prepare_worker(**_: Any) -> None:
    """Load what every task needs before the pool forks, and refuse to start with unloadable tools."""
    if settings.provider == "anthropic":
        # Imported once here, shared by the forked children; otherwise each child pays seconds on its first turn.
        import agent.provider.anthropic_provider  # noqa: F401
    try:
        wiring.chat_tools(settings)
    except (ToolLoadError, ToolDefinitionError) as err:
        log.critical("invalid settings: BATON_TOOLS: %s", err)
        sys.stderr.write(f"invalid settings: BATON_TOOLS: {err}\n")
        sys.stderr.flush()
        os._exit(2)


@signals.worker_process_init.connect
def _on_child_start(**_: Any) -> None:
    # A forked child must not share the parent's sockets.
    wiring.redis_client.cache_clear()
