"""What every part of `AsyncClient` stands on: its connections (the store's two pools, the publish threads), the
store reads it makes one at a time, the broker publish, and the guard that turns a store outage into
`Unavailable`. `tasks/client/async_client.py` says why the publish runs on threads of its own."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, Self, TypeVar, cast

from config.settings import Settings, load_settings
from tasks.client import core
from tasks.client.agent_picker import AsyncAgentPicker
from tasks.client.core import Kind
from tasks.client.publisher import PUBLISH_ERRORS, Publisher, failure_of
from tasks.reach import STORE_ERRORS, Unavailable
from tasks.store import enqueue as enqueue_script
from tasks.store import keys
from tasks.store.async_pools import AsyncPools
from tasks.store.fenced import Batch
from tasks.store.records import UnitRecord
from tasks.store.replies import text
from tasks.store.settled_watch import OwnReads, SettledWatch
from tasks.store.withdrawal import WITHDRAW, withdraw_call

P = ParamSpec("P")
R = TypeVar("R")

PUBLISH_THREADS = 4  # broker connections a burst of sends may hold at once (Celery's producer pool hands them out)


def reaching(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The store's connection errors leave a public coroutine as `Unavailable`, naming the store."""

    @functools.wraps(method)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            await cast(AsyncBase, args[0]).learn_slots()
            return await method(*args, **kwargs)
        except STORE_ERRORS as err:
            client = args[0]
            assert isinstance(client, AsyncBase)
            raise Unavailable("store", client.settings, err) from err

    return guarded


class AsyncBase:
    """The asyncio client: `await ac.send_message(...)`, `await ac.wait(ref)`, `async for e in ac.stream(id)`.

    Made outside a loop or in one; it connects lazily, inside the loop that first uses it. `await ac.aclose()`
    (or `async with AsyncClient() as ac`) releases its connections and threads.
    """

    def __init__(
        self, settings: Settings | None = None, *, max_connections: int | None = None, client_name: str | None = None
    ) -> None:
        """`max_connections`: the size of the pool for blocking reads (default `BATON_API_REDIS_CONNECTIONS`):
        every open `stream` and `follow` holds one connection while it blocks, and all `wait`s together hold one
        (`tasks.store.settled_watch`); other commands share a small pool (`tasks.store.async_pools`)."""
        self.settings = settings or load_settings()
        self._pools = AsyncPools(
            self.settings, max_connections=max_connections or self.settings.api_redis_connections,
            client_name=client_name,
        )
        self.redis, self._store = self._pools.reads, self._pools.commands
        self.learn_slots = self._pools.learn_slots  # on a Redis Cluster: the slots learnt before the first command
        self._publisher = Publisher(self.settings)
        self._threads = ThreadPoolExecutor(PUBLISH_THREADS, thread_name_prefix="baton-publish")
        self._threads.submit(self._publisher.warm, PUBLISH_THREADS)  # see Publisher.warm: not on a burst's time
        self._enqueue = self._store.register_script(enqueue_script.SCRIPT)
        self._agents = AsyncAgentPicker(self._store, self.settings.agent_wait)
        watch = OwnReads if keys.clustered() else SettledWatch
        self._settled: SettledWatch | OwnReads = watch(self.redis, STORE_ERRORS)
        self._tails = core.SettledTails()  # where a wait for a turn this client enqueued reads the signal from

    async def aclose(self) -> None:
        await self._settled.aclose()
        await self._pools.aclose()
        self._threads.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # -- the store, one read each ----------------------------------------------------------------

    async def _record(self, owner: str, unit: str) -> UnitRecord | None:
        return UnitRecord.from_hash(await self._store.hgetall(keys.record(owner, unit)))

    async def _head_record(self, owner: str) -> UnitRecord | None:
        """The chat's oldest unfinished turn (`tasks.store.reads.chat_head_record`)."""
        while True:
            head = await self._store.lindex(keys.queue(owner), 0)
            if head is None:
                return None
            rec = await self._record(owner, text(head))
            if rec is not None and not rec.terminal:
                return rec
            await self._store.lrem(keys.queue(owner), 1, text(head))

    async def _last_turn(self, owner: str) -> UnitRecord | None:
        last = await self._store.lindex(keys.turns(owner), -1)
        return await self._record(owner, text(last)) if last else None

    async def _owner(self, ident: str, kind: Kind | None = None) -> str:
        core.check_id(ident, "id")
        exists = None
        if kind is None:
            exists = bool(await self._store.exists(keys.record(keys.owner("run", ident), ident)))
        return core.owner_of(ident, kind, exists)

    # -- the broker ------------------------------------------------------------------------------

    async def _prepared(self, rec: UnitRecord) -> Batch:
        """`Publisher.prepared` on this client's threads: Celery builds a message in ~0.3 ms of Python, and its
        producer pool may block, neither of which the event loop should wait for."""
        if not self._publisher.broker_is_store:
            return Batch()
        in_context = contextvars.copy_context().run  # the caller's span: the message carries its `traceparent`
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, in_context, self._publisher.prepared, rec, rec.task_id
        )

    async def _send(self, rec: UnitRecord, task_id: str | None = None) -> None:
        """`Publisher.send` with its publish on this client's threads (see the module) and its store I/O here."""
        task_id = task_id or rec.task_id
        loop = asyncio.get_running_loop()
        try:
            # In the caller's context (a web request's span): the publish puts its `traceparent` in the message.
            in_context = contextvars.copy_context().run
            await loop.run_in_executor(self._threads, in_context, self._publisher.publish, rec, task_id)
        except PUBLISH_ERRORS as err:
            script_keys, args = withdraw_call(rec, task_id, failure_of(err), time.time())
            withdrawn = bool(await self._store.eval(WITHDRAW, len(script_keys), *script_keys, *args))
            if withdrawn and rec.kind == "turn":
                await self._start_next(rec.owner_id)
            raise self._publisher.unavailable(rec, err, withdrawn=withdrawn) from err

    async def _start_next(self, owner: str) -> None:
        nxt = await self._head_record(owner)
        if nxt is None or nxt.status != "queued":
            return
        # Best effort, as `Publisher._start_next`: the broker was just found unreachable.
        with contextlib.suppress(*PUBLISH_ERRORS):
            await asyncio.get_running_loop().run_in_executor(self._threads, self._publisher.publish, nxt, nxt.task_id)
