"""The drain and the recovery sweep, wired to the worker's signals.

Drain: on `worker_shutting_down` (main process, at once on SIGTERM's warm shutdown) we set a
Redis flag for this worker; each executing unit's watcher sees it within ~0.5 s, aborts its
stream or lets its tool settle, checkpoints and requeues itself with `Task.retry` (a RETRY in
Flower, reason `PlatformInterrupt`). The warm shutdown then finds nothing running and exits.

Sweep: a thread in each worker's main process finds units whose lease expired while they were
running (their worker was SIGKILLed or lost) and requeues them, counted as interruptions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis
from celery import signals
from celery.concurrency import get_implementation

from agent.errors import CueLoadError, McpConfigError, ToolDefinitionError, ToolLoadError
from agent.tools import commands
from config.topology import broker_kind
from tasks import reach
from tasks.app import app, settings
from tasks.execution import wiring
from tasks.execution.watcher import drain_on_signal
from tasks.runtime.approval_expiry import expire_approvals
from tasks.runtime.gevent_compat import call_off_the_hub
from tasks.runtime.live_trim import trim_live_text
from tasks.runtime.outage import Outage
from tasks.runtime.retention import delete_doomed, expire_idle
from tasks.runtime.sweeper import pending_check_seconds, publish, sweep_lost_messages, sweep_once
from tasks.runtime.unacked import INTERVAL as UNACKED_INTERVAL
from tasks.runtime.unacked import UnackedRestorer
from tasks.store import agents as published_agents
from tasks.store import budget_marks, budgets, connect, keys

log = logging.getLogger("baton.drain")
# The MCP SDK's HTTP client logs every request at INFO: a line per tool call in a worker's log says nothing useful.
for _chatty in ("httpx", "httpx2"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

DRAIN_FLAG_TTL_S = 300
_sweeper_halt = threading.Event()
_sandbox_notice: list[tuple[int, str]] = []
_provider_notice: list[tuple[int, str]] = []
_green_pool = [False]  # set at worker_init: the pool's consumer loop is Celery's blocking synloop under gevent/eventlet
_prefork = [True]  # set at worker_init: units run in forked children (else in this process, which owns the MCP servers)
PIDBOX_PINGS, PIDBOX_PING_SECONDS = 6, 0.5  # past 3 s the consumer's own poll has stopped it anyway
MCP_CLOSE_SECONDS = 6.0  # the SDK gives a stdio server 2 s to exit once its stdin closes, then kills its process tree


@signals.worker_shutting_down.connect
def _on_shutting_down(sender: Any = None, sig: Any = None, how: Any = None, **_: Any) -> None:
    call_off_the_hub(_set_drain_flag, str(sender), how, sig)


def _set_drain_flag(hostname: str, how: Any, sig: Any) -> None:
    try:
        pipe = wiring.store(settings).pipeline(transaction=False)
        for key in keys.drains(hostname):
            pipe.set(key, str(time.time()), ex=DRAIN_FLAG_TTL_S)
        pipe.execute()
        log.info("drain: %s is shutting down (%s %s); running units will checkpoint and requeue", hostname, how, sig)
    except reach.STORE_ERRORS as err:  # a shutdown must go on even if Redis is gone
        unreachable = reach.Unavailable("store", settings, err)
        log.error("drain: could not set the drain flag for %s: %s", hostname, unreachable)
    except Exception:
        log.exception("drain: could not set the drain flag for %s", hostname)
    _sweeper_halt.set()
    if _green_pool[0]:
        # Off the shutdown's path: kombu retries a publish while the broker is down, for as long as it takes.
        threading.Thread(target=_stop_consuming_now, args=(hostname,), name="baton-stop-consuming", daemon=True).start()


def _stop_consuming_now(hostname: str) -> None:
    """Stop the consumer loop now, by a remote-control `shutdown` addressed to this worker alone.

    On a green pool Celery's consumer runs its blocking loop, which notices a warm shutdown only after its
    `drain_events(timeout=2.0)` returns, and then polls once more (`maybe_shutdown` raises inside a `try` whose
    `finally` runs another cycle): an idle gevent worker took 4.3 s to exit on SIGTERM, a drain up to 5 s. The
    command raises the same `WorkerShutdown` as the signal's warm path, from inside the poll: 1.4 s. Running units
    still checkpoint and requeue, since the warm shutdown waits for the pool as before. Best effort: if the broker
    cannot take it, the loop stops on its own a few seconds later, and this thread dies with the process.

    The command is sent only once the worker's pidbox answers a ping. On a green pool the pidbox subscribes from a
    greenlet of its own, after the worker says it is ready, and a Redis broker's broadcast is a PUBLISH: one sent
    before that subscription reaches nobody. A worker stopped just after it started lost the command that way and
    took 4.7 s.
    """
    try:
        for _ in range(PIDBOX_PINGS):
            if app.control.ping(destination=[hostname], timeout=PIDBOX_PING_SECONDS):
                app.control.broadcast(
                    "shutdown", destination=[hostname], arguments={"msg": f"drain: {hostname} stops consuming now"}
                )
                return
    except Exception as err:  # a shutdown must go on whatever the broker says
        log.warning("drain: could not stop %s's consumer at once (%s); it stops after its next poll", hostname, err)


@signals.worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    hostname = getattr(sender, "hostname", None) or str(sender)
    for level, message in _sandbox_notice:
        log.log(level, "sandbox: %s", message)
    for level, message in _provider_notice:
        log.log(level, "provider: %s", message)
    if not _prefork[0]:
        _start_mcp_servers()
    # Nothing here may need the store: a worker started while it is down must still start its sweeps, which
    # wait for it (a handler that raised here left the worker consuming with no sweeper at all).
    threading.Thread(target=_sweep_forever, args=(hostname,), name="baton-sweeper", daemon=True).start()
    # Celery logs "ready." when this returns: with the store up, a client that sends as soon as it reads that finds
    # this worker's agents published (an agent named before then was refused as unknown); with it down, the worker
    # says ready a moment later and publishes once the store answers.
    _agents_published.wait(AGENTS_READY_WAIT)


def _sweep_forever(hostname: str) -> None:
    """Clear this worker's stale drain flag, then sweep every `interval` until shutdown, through outages."""
    client: redis.Redis | None = None  # built in the loop: a cluster's client asks its nodes as it is built
    interval = min(2.0, settings.lease_ttl / 4)
    # Lost broker messages can be looked for only in a Redis broker: kombu's Redis transport pops a message
    # before recording it as unacked. RabbitMQ keeps an unacknowledged message until its consumer's channel
    # closes and then redelivers it, so no republish is needed there (and one while a copy is queued would
    # only make a second copy for the lease to turn away).
    broker = lost_message_broker()
    store = Outage(f"{reach.label('store', settings)} at {reach.store_address(settings)}", interval)
    # Its own outage when the broker is another Redis (Celery's consumer says so too, in its own words).
    elsewhere = broker is not None and settings.broker not in (settings.redis_url, settings.result_backend)
    broker_place = f"{reach.label('broker', settings)} at {reach.broker_address(settings)}"
    lost_messages = Outage(broker_place, interval) if elsewhere else store
    cleared = False  # a drain flag left by this hostname's previous life (it expires, but would drain us now)
    marks = budget_marks.Upkeep()  # a cluster's budgets' marks (tasks/store/budget_marks.py)
    next_lost_check = time.monotonic() + pending_check_seconds(settings) / 2
    # A prefork worker's consumer restores kombu's unacked messages; no other does (tasks/runtime/unacked.py).
    restorer = UnackedRestorer(app) if broker is not None and not _prefork[0] else None
    next_restore = time.monotonic() + UNACKED_INTERVAL
    while True:
        with _telling(store):
            if client is None:
                client = wiring.store(settings)
            if marks.keep(client):  # first before the worker says ready: budgets an earlier Baton set count at once
                log.warning("budgets: marked on every shard (budgets kept without their marks: set by an earlier "
                            "Baton, or a mark lost)")
            if not cleared:
                pipe = client.pipeline(transaction=False)
                for key in keys.drains(hostname):  # one DEL each: a cluster's DEL takes the keys of one slot
                    pipe.delete(key)
                pipe.execute()
                cleared = True
                publish_agents(client, hostname, definitions=True)
                log.info("agents: %s serves %s", hostname, ", ".join(wiring.agents(settings).agents))
                _agents_published.set()
            else:
                publish_agents(client, hostname, definitions=False)
                for owner_id in sweep_once(client, app, settings):
                    log.warning("recovered %s: its worker was lost; requeued", owner_id)
                trim_live_text(client, time.time(), limit=100)  # the settled units' slimming is here too
                for tool_use_id in expire_approvals(client, time.time(), lambda rec: publish(app, settings, rec)):
                    log.info("approval of %s expired: denied", tool_use_id)
                now = time.time()
                for owner_id in [*delete_doomed(client, now), *expire_idle(client, settings.retention, now)]:
                    log.info("deleted %s (BATON_RETENTION, or a delete with stop=True that has settled)", owner_id)
        if cleared and client is not None and store.since is None and time.monotonic() >= next_lost_check:
            next_lost_check = time.monotonic() + pending_check_seconds(settings) / 2
            with _telling(lost_messages):  # on RabbitMQ (broker None): only forgets finished owners
                for owner_id in sweep_lost_messages(client, broker, app, settings):
                    log.warning("republished %s: the broker lost its message before it started", owner_id)
                if budgets.release_orphans(client):
                    log.warning("settled budget reservations of executions that lost their lease, at the worst case")
        if restorer is not None and time.monotonic() >= next_restore:
            next_restore = time.monotonic() + UNACKED_INTERVAL
            with _telling(lost_messages):
                restorer.restore()
        if _sweeper_halt.wait(interval):
            return


_agents_forgotten = [0.0]  # when this worker last dropped stale published entries (monotonic)


def publish_agents(client: redis.Redis, hostname: str, *, definitions: bool) -> None:
    """Say which agents this worker serves (clients validate against it; `baton agents` lists it), with their
    definitions at start; now and then forget the entries no worker renewed within BATON_AGENT_WAIT."""
    now = time.time()
    published_agents.publish(client, wiring.agents(settings), hostname, now, definitions=definitions)
    if time.monotonic() - _agents_forgotten[0] >= AGENTS_FORGET_SECONDS:
        _agents_forgotten[0] = time.monotonic()
        _, stale = published_agents.fold(client.hgetall(keys.AGENTS), now, settings.agent_wait)
        published_agents.forget(client, stale)


AGENTS_FORGET_SECONDS = 30.0
AGENTS_READY_WAIT = 3.0  # how long the worker's "ready." waits for its agents' first publishing
_agents_published = threading.Event()


@contextlib.contextmanager
def _telling(place: Outage) -> Iterator[None]:
    """Run one sweep step: an outage of `place` is told once (and its end), any other failure each time."""
    try:
        yield
    except reach.STORE_ERRORS as err:
        if (line := place.failed(err, time.monotonic())) is not None:
            log.error("%s", line)
    except Exception:
        log.exception("recovery sweep failed; trying again")
    else:
        if (line := place.reached(time.monotonic())) is not None:
            log.warning("%s", line)


def lost_message_broker() -> redis.Redis | None:
    """The Redis the broker's queue and unacked hash live in, or None for RabbitMQ (nothing to look for)."""
    if broker_kind(settings.broker) == "amqp":
        return None
    if settings.broker.startswith("sentinel://"):
        return wiring.store(settings)  # the broker is the store, reached through the same Sentinels
    return wiring.redis_client(settings.broker)


@signals.worker_init.connect
def _prepare_worker(sender: Any = None, **_: Any) -> None:
    """Load what every task needs before the pool forks; refuse to start with unloadable tools or cues."""
    size_connection_pools(sender)
    _green_pool[0] = bool(getattr(pool_class(sender), "is_green", False))
    if settings.provider == "anthropic":
        # Imported once here, shared by the forked children; otherwise each child pays seconds on its first turn.
        import agent.provider.anthropic_provider  # noqa: F401
    _prefork[0] = "prefork" in pool_class(sender).__module__
    try:
        wiring.mcp_specs(settings.mcp_servers)
    except McpConfigError as err:
        _refuse_to_start("BATON_MCP_SERVERS", err)
    try:
        wiring.python_tools(settings.tools)  # imported once here, before the fork; MCP servers start after it
    except (ToolLoadError, ToolDefinitionError) as err:
        _refuse_to_start("BATON_TOOLS", err)
    try:
        wiring.agents(settings)  # reads BATON_MCP_SERVERS' names only; no server starts here
    except Exception as err:  # whatever its module raises on import: a signal handler's error would not stop Celery
        _refuse_to_start("BATON_AGENTS", err)
    if settings.provider == "scripted":
        try:
            wiring.scripted_cues(settings.scripted_cues)
        except CueLoadError as err:
            _refuse_to_start("BATON_SCRIPTED_CUES", err)
    # Probed here, before the pool forks; logged once the worker's logging is set up (in worker_ready).
    _sandbox_notice[:] = [check_sandbox()]
    _provider_notice[:] = check_provider()


def check_provider() -> list[tuple[int, str]]:
    """A warning when the provider cannot authenticate: the worker still starts (a key may be fixed by a redeploy
    while turns wait in the queue), but says at start what every unit will fail with."""
    if settings.provider == "anthropic":
        from agent.provider.anthropic_provider import credentials_problem
    elif settings.provider == "openai":
        from agent.provider.openai_provider import credentials_problem
    else:
        return []
    problem = credentials_problem()
    if problem is None:
        return []
    return [(logging.WARNING, f"BATON_PROVIDER={settings.provider}, but {problem}; every turn and run will fail as "
                              "provider_auth")]


def pool_class(worker: Any) -> Any:
    """The Celery pool class a worker runs (`-P`, else the app's `worker_pool`)."""
    return get_implementation(getattr(worker, "pool_cls", None) or app.conf.worker_pool)


def size_connection_pools(worker: Any) -> None:
    """Size the store's connection pools for the units one process of this worker runs at once.

    A threads or gevent pool runs all its `-c` units in the one process, sharing its pooled clients; prefork runs
    one per child. Celery's own result backend and Redis broker pools are sized alike (redis-py's default fails past
    100 connections, kombu's channel past 10).
    """
    concurrency = getattr(worker, "concurrency", None)
    if not isinstance(concurrency, int) or concurrency < 1:
        return  # "auto", or a sender that is not a WorkController: keep the defaults
    units = wiring.units_per_process(pool_class(worker).__module__, concurrency)
    wiring.size_pools(units)
    if units > 1:
        app.conf.redis_max_connections = max(app.conf.redis_max_connections or 0, connect.pool_size())
        # One result backend (one client, one pool) for all the process's units, not one built per pool thread
        # on its first task: each built a client and a pool, and read redis-py's version from its metadata.
        app.conf.result_backend_thread_safe = True
        if broker_kind(settings.broker) != "amqp":
            # kombu's Redis channel opens at most 10 connections: on gevent, concurrent acks failed past them
            # ("Couldn't ack ... MaxConnectionsError"), leaving the messages to come back after the visibility timeout.
            options = dict(app.conf.broker_transport_options or {})
            options["max_connections"] = max(options.get("max_connections", 0), connect.pool_size())
            app.conf.broker_transport_options = options


def check_sandbox() -> tuple[int, str]:
    """How model-chosen commands will run on this worker, as (log level, message), probed once at start.

    A sandbox that cannot start is a warning, not an exit: chat turns still work, and every `run_command`
    refuses with the same reason (fail closed).
    """
    policy = wiring.sandbox_policy(settings)
    if policy is None:
        return logging.WARNING, (
            "BATON_SANDBOX=none: run_command runs model-chosen commands UNCONFINED, as this worker's user: they can "
            "read this worker's environment (API key, Redis password) through /proc, reach Redis and the network, "
            "and write anywhere this user can"
        )
    reason = commands.probe(policy)
    if reason is not None:
        return logging.WARNING, f"run_command will refuse every command: {reason}"
    if os.geteuid() == 0 and policy.run_as is None:
        return logging.WARNING, (
            "the worker runs as root: the kernel does not apply the sandbox's process limit (RLIMIT_NPROC) to uid 0, "
            "so a fork bomb is bounded only by the command timeout; run the worker as a non-root user or set "
            "BATON_SANDBOX_UID"
        )
    network = "with" if policy.network else "without"
    return logging.INFO, f"run_command runs in the bubblewrap sandbox, {network} network"


def _refuse_to_start(variable: str, err: Exception) -> None:
    # A bad setting must stop the worker at start, naming the variable, not fail every unit later.
    log.critical("invalid settings: %s: %s", variable, err)
    sys.stderr.write(f"invalid settings: {variable}: {err}\n")
    sys.stderr.flush()
    os._exit(2)


@signals.worker_process_init.connect
def _on_child_start(**_: Any) -> None:
    # A forked child must not share the parent's sockets.
    wiring.forget_clients()
    _prefork_child[0] = True
    _start_mcp_servers()


def _start_mcp_servers() -> None:
    """Start this process's MCP servers in the background (a server that cannot start is logged now); the first
    unit waits for them. Off the start's path: Celery gives a pool child a few seconds to come up."""
    if settings.mcp_servers:
        threading.Thread(target=wiring.mcp_tools, args=(settings,), name="baton-mcp-start", daemon=True).start()


@signals.worker_process_shutdown.connect
def _on_child_exit(**_: Any) -> None:
    wiring.close_mcp(MCP_CLOSE_SECONDS)


@signals.worker_shutdown.connect
def _on_worker_exit(**_: Any) -> None:
    # A pool that runs its units in this process (solo, threads) started its MCP servers here.
    wiring.close_mcp(MCP_CLOSE_SECONDS)


# Celery resets a prefork child's SIGTERM, and billiard then makes it exit at once: a SIGTERM sent to the worker's
# whole process group (systemd's default KillMode, `pkill celery`, an init that signals the group) made every running
# unit a lost worker's, and a write tool between its write-ahead entry and its effect was never run (the resume may
# not repeat it). The child's handler drains its units instead, as the master's drain flag does. It is installed when
# the child's first task starts: billiard installs its own after the child's initializer, over one set there.
_prefork_child = [False]
_previous_sigterm: list[Any] = []


@signals.task_prerun.connect
def _on_task_start(**_: Any) -> None:
    if _prefork_child[0] and not _previous_sigterm:
        _previous_sigterm.append(signal.getsignal(signal.SIGTERM))
        signal.signal(signal.SIGTERM, _child_sigterm)


def _child_sigterm(signum: int, frame: Any) -> None:
    """A SIGTERM that reached this pool child: drain its running units; a second one, or none running, ends it as
    billiard's own handler would (billiard's terminate on a cold shutdown still ends the child)."""
    previous = _previous_sigterm[0] if _previous_sigterm else signal.SIG_DFL
    signal.signal(signal.SIGTERM, previous)
    if drain_on_signal():
        return
    if callable(previous):
        previous(signum, frame)
    else:
        os.kill(os.getpid(), signum)
