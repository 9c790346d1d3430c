"""The watcher: heartbeats the lease and turns a stop request or a worker drain into a cancellation.

It runs beside the executing task in the pool child, because pool children never see the worker's
shutdown (FACTS.md): the main process sets a Redis flag on `worker_shutting_down`, this polls it.

One `Poller` per process (per store client) beats for every unit the process runs: a single thread (a
greenlet under gevent), one pipelined round trip every `POLL_SECONDS` that renews the leases due, reads every
unit's stop flag in one MGET and the drain flag once. A unit's `Watcher` registers with it while the unit runs.
A thread and a poll per unit cost nothing at prefork's one unit per child; at a threads pool's hundreds of
units in one process they were hundreds of threads and of round trips a second, and as many connections.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from agent.loop.cancel import CancelToken
from agent.per_process import PerProcess
from tasks.store import keys
from tasks.store.direct import raised
from tasks.store.lease import Lease
from tasks.store.replies import text_or_none

log = logging.getLogger("baton.watcher")

POLL_SECONDS = 0.5

# A SIGTERM that reaches a prefork pool child itself (sent to the worker's whole process group: systemd's default
# KillMode, `pkill celery`, an init that signals the group) would end it at once, Celery's default there: a crash,
# not a drain, and a write tool whose write-ahead entry was in, its effect not yet, was then never run. The child's
# handler (tasks/runtime/drain.py) only bumps this epoch; the poller drains every unit that started before it.
_signal_epoch = [0]
_units_here = [0]  # units this process runs now (read by the signal handler, which must take no lock)
_units_lock = threading.Lock()


def drain_on_signal() -> bool:
    """Drain the units this process runs now, from a signal handler (no lock taken, no I/O); True when there are any
    (else there is nothing to hand over and the caller ends the process as before)."""
    _signal_epoch[0] += 1
    return _units_here[0] > 0
# How long a unit leaving waits for a beat in flight to finish (so no beat acts for it once it is gone).
LEAVE_WAIT_SECONDS = 2.0
# A poller that wakes this late from its pause between beats puts the process's leases at risk: another worker may
# take a unit whose lease lapsed while this one still runs it. Only a process starved of the CPU, stopped, or whose
# event loop a call blocked (gevent) oversleeps this much. A beat that is slow because the store is (a failover, a
# restart) is not counted: no other worker can take the lease from a store that does not answer either.
LATE_BEAT_SECONDS = 1.0


class Watcher:
    """One unit's lease, stop flag and drain flag, beaten by its process's `Poller` while it runs."""

    def __init__(
        self, client: redis.Redis, lease: Lease, *, owner_id: str, unit_id: str, hostname: str, cancel: CancelToken
    ) -> None:
        self._client = client
        self._lease = lease
        self.owner_id = owner_id
        self._unit_id = unit_id
        self.drain_key = keys.drain(hostname, owner_id)
        self._cancel = cancel
        self.lease_lost = False
        self._read_with_results = False  # the flags came with the last tool result's write, after its tool ran
        # The lease (and the ACTIVE mark) are renewed a third of a TTL at a time, not on every poll: the stop
        # and drain flags need a prompt look, the lease only needs to outlive a missed beat or two.
        self._renew_every = lease.ttl_ms / 3000
        self._renewed_at = time.monotonic()  # the lease was just taken, with a whole TTL
        self._poller: Poller | None = None
        self._epoch = _signal_epoch[0]

    def start(self, *, poll: bool = True) -> Watcher:
        """Start beating; `poll=False` when the caller already read the flags (`seen`) with the lease."""
        if poll:
            self.poll_once()
        with _units_lock:
            _units_here[0] += 1
        self._poller = poller_for(self._client)
        self._poller.add(self)
        return self

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.discard(self)
            with _units_lock:
                _units_here[0] -= 1

    def signalled(self) -> bool:
        """Drain this unit if a SIGTERM reached this process after it started; True when it did."""
        if self._epoch >= _signal_epoch[0]:
            return False
        self._cancel.cancel("drain")
        return True

    def due(self, now: float) -> bool:
        """Whether the lease is due for renewal at this beat (half a poll early, so it is never late)."""
        return now - self._renewed_at >= self._renew_every - POLL_SECONDS / 2

    def queue_renewal(self, pipe: redis.client.Pipeline) -> None:
        self._lease.queue_renewal(pipe)

    def renewal(self, reply: Any) -> Any:
        """The queued renewal's reply; where the server lacked the script (NOSCRIPT: it restarted), the renewal
        again, through the client, which loads it."""
        return self._lease.renew() if isinstance(reply, NoScriptError) else reply

    def renewed(self, asked: float, ok: bool) -> None:
        """The renewal queued at `asked` went through: `ok` False means the lease is no longer ours."""
        self._renewed_at = asked  # only once it went through: a failed renewal is tried again on the next beat
        if not ok:
            self.lease_lost = True
            self._cancel.cancel("drain")

    def seen(self, *, stop: str | None, draining: bool) -> None:
        """Act on the stop and drain flags as read: a stop naming this unit (or all), or a drain, cancels."""
        if keys.stop_names(stop, self._unit_id):
            self._cancel.cancel("stop")
        elif draining:
            self._cancel.cancel("drain")

    # -- one unit's beat, on its own (the poller beats all of a process's units together) -------------------

    def poll_once(self) -> None:
        """One pipelined round trip: renew the lease, read the stop and drain flags, mark us alive."""
        beat(self._client, [self], renewing=[self])

    def look_once(self) -> None:
        """The light poll between renewals: only the stop and drain flags, in one round trip."""
        beat(self._client, [self], renewing=[])

    def seen_with_results(self, stop: str | None, draining: bool) -> None:
        """The flags as a tool result's write read them, after the tool ran (RedisJournal's `Flags`): acted on, and
        the loop's next look has its answer already."""
        self.seen(stop=stop, draining=draining)
        self._read_with_results = True

    def read_with_next_call(self) -> Callable[[str | None, bool], None]:
        """The flags come with the next model call's preflight, read after a read tool's result is written in it
        (RedisJournal's `Flags.later`), before that call is sent: the loop's look between has its answer coming,
        and asks no round trip. Returns what acts on them."""
        self._read_with_results = True
        return lambda stop, draining: self.seen(stop=stop, draining=draining)

    def look_now(self) -> None:
        """`look_once` for the loop, between a round of tools and the next model step (CancelToken.look): the
        poller is the backstop, so a store that does not answer here is logged, not raised. When the round's last
        tool result was written with the flags (`seen_with_results`), they were read after every tool of the round
        ran, which is all a look asks: no round trip."""
        if self._read_with_results:
            self._read_with_results = False
            return
        try:
            self.look_once()
        except redis.RedisError as err:
            log.warning("watcher: the stop and drain flags could not be read between steps: %s", type(err).__name__)

    def tick(self) -> None:
        """One beat: a full poll when the lease is due for renewal, else the light look."""
        beat(self._client, [self])


def beat(client: redis.Redis, watchers: Sequence[Watcher], *, renewing: Iterable[Watcher] | None = None) -> None:
    """One round trip for all `watchers`: renew the leases due (or `renewing`), read their stop and drain flags.

    Raises what Redis raised; then nothing was acted on, and a renewal that did not go through is due again.
    """
    if not watchers:
        return
    asked = time.monotonic()
    renew = [w for w in watchers if w.due(asked)] if renewing is None else list(renewing)
    drains = list(dict.fromkeys(w.drain_key for w in watchers))
    pipe = client.pipeline(transaction=False)
    for watcher in renew:
        watcher.queue_renewal(pipe)
    beats = active_marks(renew, time.time())
    for key, marks in beats.items():
        # Alive, for the lost-worker sweep. XX: only refresh the mark the fenced start wrote, so a beat racing the
        # unit's deletion (store/deletion.py) cannot put a deleted unit back in the index.
        pipe.zadd(key, marks, xx=True)
    stop_keys = [keys.stop(w.owner_id) for w in watchers]
    if keys.clustered():
        for key in stop_keys:  # a cluster's MGET takes the keys of one slot only
            pipe.get(key)
    else:
        pipe.mget(stop_keys)
    for key in drains:
        pipe.exists(key)
    replies = pipe.execute(raise_on_error=False)
    replies[:len(renew)] = [watcher.renewal(reply) for watcher, reply in zip(renew, replies[:len(renew)], strict=True)]
    replies = [raised(reply) for reply in replies]  # the first error reply, as `execute` would have raised it
    first = len(renew) + len(beats)
    stops = replies[first:first + len(watchers)] if keys.clustered() else replies[first]
    draining = dict(zip(drains, replies[-len(drains):], strict=True))
    for watcher, ok in zip(renew, replies, strict=False):
        _act(watcher.renewed, asked, bool(ok))
    for watcher, stop in zip(watchers, stops, strict=True):
        if not watcher.lease_lost:
            _act(watcher.seen, stop=text_or_none(stop), draining=bool(draining[watcher.drain_key]))


def active_marks(watchers: list[Watcher], now: float) -> dict[str, dict[str, float]]:
    """The heartbeats of `watchers` for the lost-worker sweep, one ZADD per shard of `keys.ACTIVE` they fall in."""
    marks: dict[str, dict[str, float]] = {}
    for watcher in watchers:
        marks.setdefault(keys.active(watcher.owner_id), {})[watcher.owner_id] = now
    return marks


def _act(action: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run one unit's reaction (a cancel runs its callbacks, e.g. closing a stream): a failure stays its own."""
    try:
        action(*args, **kwargs)
    except Exception:
        log.exception("watcher: a unit's cancellation failed")


class Poller:
    """The process's one beating thread for all its running units (started with the first, idle without)."""

    def __init__(
        self, client: redis.Redis, *, interval: float = POLL_SECONDS, pause: Callable[[float], None] | None = None
    ) -> None:
        self._client = client
        self._interval = interval
        self._pause = pause  # how the thread waits between beats (time.sleep, looked up when called)
        self._watchers: dict[int, Watcher] = {}
        self._lock = threading.Lock()  # guards `_watchers`
        self._beating = threading.Lock()  # held for a beat, so a unit that leaves is not acted on after
        self._thread: threading.Thread | None = None

    def add(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers[id(watcher)] = watcher
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="baton-poller", daemon=True)
                self._thread.start()

    def discard(self, watcher: Watcher) -> None:
        got = self._beating.acquire(timeout=LEAVE_WAIT_SECONDS)
        try:
            with self._lock:
                self._watchers.pop(id(watcher), None)
        finally:
            if got:
                self._beating.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._watchers)

    def beat(self) -> None:
        """One beat for every registered unit (what the thread does every interval)."""
        with self._beating:
            with self._lock:
                watchers = list(self._watchers.values())
            # Before the round trip, which a store that is down would fail: a signalled drain needs no Redis.
            if any([w.signalled() for w in watchers]):
                log.warning("drain: this pool process got SIGTERM; its running units checkpoint and requeue")
            beat(self._client, watchers)

    def _run(self) -> None:
        deadline = time.monotonic()
        while True:
            deadline += self._interval
            asked = time.monotonic()
            pause = max(0.0, deadline - asked)
            (self._pause or time.sleep)(pause)
            late = time.monotonic() - asked - pause
            if late > LATE_BEAT_SECONDS:
                log.warning("watcher: the beat came %.1f s late (this process was starved or blocked); its units'"
                            " leases were at risk", late)
            deadline = max(deadline, time.monotonic() - self._interval)  # after a long stall, do not catch up
            try:
                self.beat()
            except redis.exceptions.RedisError as err:
                # Redis may be restarting; the leases outlive a few missed beats.
                log.warning("watcher could not reach Redis: %s", err)
            except Exception:  # the thread must outlive any one beat, or every unit of the process goes unwatched
                log.exception("watcher beat failed")


_pollers: PerProcess[Poller] = PerProcess()


def poller_for(client: redis.Redis) -> Poller:
    """The process's poller for this client (keyed by pid: a forked pool child starts its own thread)."""
    return _pollers.get(id(client), lambda: Poller(client))
