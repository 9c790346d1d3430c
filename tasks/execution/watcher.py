"""The watcher: heartbeats the lease and turns a stop request or a worker drain into a cancellation.

It runs beside the executing task in the pool child, because pool children never see the worker's
shutdown (FACTS.md): the main process sets a Redis flag on `worker_shutting_down`, this polls it.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from agent.cancel import CancelToken
from tasks.store import keys
from tasks.store.lease import Lease

log = logging.getLogger("baton.watcher")

POLL_SECONDS = 0.5


class Watcher:
    def __init__(
        self, client: redis.Redis, lease: Lease, *, owner_id: str, unit_id: str, hostname: str, cancel: CancelToken
    ) -> None:
        self._client = client
        self._lease = lease
        self._owner_id = owner_id
        self._unit_id = unit_id
        self._drain_key = keys.drain(hostname)
        self._cancel = cancel
        self._halt = threading.Event()
        self.lease_lost = False
        # The lease (and the ACTIVE mark) are renewed a third of a TTL at a time, not on every poll: the stop
        # and drain flags need a prompt look, the lease only needs to outlive a missed beat or two.
        self._renew_every = lease.ttl_ms / 3000
        self._renewed_at = time.monotonic()  # the lease was just taken, with a whole TTL
        self._thread = threading.Thread(target=self._run, name=f"watch:{owner_id}", daemon=True)

    def start(self, *, poll: bool = True) -> Watcher:
        """Start beating; `poll=False` when the caller already read the flags (`seen`) with the lease."""
        if poll:
            self.poll_once()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def poll_once(self) -> None:
        """One pipelined round trip: renew the lease, read the stop and drain flags, mark us alive."""
        pipe = self._client.pipeline(transaction=False)
        self._lease.renew(client=pipe)
        pipe.get(keys.stop(self._owner_id))
        pipe.exists(self._drain_key)
        pipe.zadd(keys.ACTIVE, {self._owner_id: time.time()})
        asked = time.monotonic()
        renewed, stop, draining, _ = pipe.execute()
        self._renewed_at = asked  # only once it went through: a failed renewal is tried again on the next beat
        if not renewed:
            self.lease_lost = True
            self._cancel.cancel("drain")
            return
        self.seen(stop=stop.decode() if isinstance(stop, bytes) else stop, draining=bool(draining))

    def seen(self, *, stop: str | None, draining: bool) -> None:
        """Act on the stop and drain flags as read: a stop naming this unit (or all), or a drain, cancels."""
        if stop and stop in (self._unit_id, "*"):
            self._cancel.cancel("stop")
        elif draining:
            self._cancel.cancel("drain")

    def look_once(self) -> None:
        """The light poll between renewals: only the stop and drain flags, in one round trip."""
        pipe = self._client.pipeline(transaction=False)
        pipe.get(keys.stop(self._owner_id))
        pipe.exists(self._drain_key)
        stop, draining = pipe.execute()
        self.seen(stop=stop.decode() if isinstance(stop, bytes) else stop, draining=bool(draining))

    def tick(self) -> None:
        """One beat: a full poll when the lease is due for renewal, else the light look."""
        if time.monotonic() - self._renewed_at >= self._renew_every - POLL_SECONDS / 2:
            self.poll_once()
        else:
            self.look_once()

    def _run(self) -> None:
        while not self._halt.wait(POLL_SECONDS):
            try:
                self.tick()
            except redis.exceptions.RedisError as err:
                # Redis may be restarting; the lease outlives a few missed beats.
                log.warning("watcher could not reach Redis: %s", err)
