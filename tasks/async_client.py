"""`AsyncClient`: every method of `Client` as a coroutine, with the same arguments, results and errors.

The store is read and written with `redis.asyncio`; every decision in between is `tasks/client_core.py`'s, the
same functions `Client` calls, so the two differ only in their I/O.

The broker publish runs on a small thread pool of this client's own. Kombu's publish is synchronous (a socket
write and, on RabbitMQ, a confirm round trip), and Celery builds the message (headers, the task-sent event
Flower reads) around it; the choice was between that thread and writing Celery's wire format onto the broker's
own asyncio client, which would exist only for a Redis broker (not RabbitMQ) and would copy a message format
Celery owns. Measured on the loop (tests/integration/test_async_client.py, a 5 ms ticker while 200 turns are
sent and awaited at once): a worst gap of 20-37 ms with the host's startup heap frozen (web/app.py says why);
the thread holds the GIL only for Celery's few hundred microseconds of message building, not for the network.
The pool is this client's, not the loop's default executor: a broker that hangs ties up these threads only, and
its size bounds the broker connections a burst of sends opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar, cast

from agent.events import Event
from agent.history.rounds import same_text
from agent.messages import Message
from config.settings import Settings, load_settings
from tasks import client_core as core
from tasks.agent_picker import AsyncAgentPicker
from tasks.client_core import Busy, Kind, OnBusy, ValidationError
from tasks.publisher import BROKER_DOWN, Publisher
from tasks.reach import BROKER_ERRORS, STORE_ERRORS, Unavailable
from tasks.store import enqueue as enqueue_script
from tasks.store import keys
from tasks.store.approvals import DECIDE, Decided, Decision, decide_call, decided, waiting_call
from tasks.store.async_pools import AsyncPools
from tasks.store.reads import parse_transcript
from tasks.store.records import RunRef, RunStatus, TurnRef, TurnResult, UnitRecord, run_status, turn_result
from tasks.store.replies import hash_mapping, read_entries, stream_entries, text, text_or_none
from tasks.store.settled_watch import OwnReads, SettledWatch
from tasks.store.tail import tail
from tasks.store.withdrawal import WITHDRAW, withdraw_call
from tasks.store.xread import axread

__all__ = ["AsyncClient"]

P = ParamSpec("P")
R = TypeVar("R")

PUBLISH_THREADS = 4  # broker connections a burst of sends may hold at once (Celery's producer pool hands them out)


def _reaching(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The store's connection errors leave a public coroutine as `Unavailable`, naming the store."""

    @functools.wraps(method)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            await cast(AsyncClient, args[0]).learn_slots()
            return await method(*args, **kwargs)
        except STORE_ERRORS as err:
            client = args[0]
            assert isinstance(client, AsyncClient)
            raise Unavailable("store", client.settings, err) from err

    return guarded


class AsyncClient:
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

    async def aclose(self) -> None:
        await self._settled.aclose()
        await self._pools.aclose()
        self._threads.shutdown(wait=False)

    async def __aenter__(self) -> AsyncClient:
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

    async def _send(self, rec: UnitRecord, task_id: str | None = None) -> None:
        """`Publisher.send` with its publish on this client's threads (see the module) and its store I/O here."""
        task_id = task_id or rec.task_id
        loop = asyncio.get_running_loop()
        try:
            # In the caller's context (a web request's span): the publish puts its `traceparent` in the message.
            in_context = contextvars.copy_context().run
            await loop.run_in_executor(self._threads, in_context, self._publisher.publish, rec, task_id)
        except BROKER_ERRORS as err:
            script_keys, args = withdraw_call(rec, task_id, BROKER_DOWN, time.time())
            withdrawn = bool(await self._store.eval(WITHDRAW, len(script_keys), *script_keys, *args))
            if withdrawn and rec.kind == "turn":
                await self._start_next(rec.owner_id)
            raise self._publisher.unavailable(rec, err, withdrawn=withdrawn) from err

    async def _start_next(self, owner: str) -> None:
        nxt = await self._head_record(owner)
        if nxt is None or nxt.status != "queued":
            return
        # Best effort, as `Publisher._start_next`: the broker was just found unreachable.
        with contextlib.suppress(*BROKER_ERRORS):
            await asyncio.get_running_loop().run_in_executor(self._threads, self._publisher.publish, nxt, nxt.task_id)

    # -- chat turns ------------------------------------------------------------------------------

    @_reaching
    async def send_message(
        self,
        chat_id: str,
        text: str,
        on_busy: OnBusy = "enqueue",
        *,
        agent: str | None = None,
        model: str | None = None,
    ) -> TurnRef:
        """Enqueue a turn (see `Client.send_message`, `on_busy`, `agent` and `model` included)."""
        core.check_id(chat_id, "chat_id")
        core.check_text(text, self.settings.max_text_chars)
        mode = core.check_on_busy(on_busy)
        pick = await self._pick(keys.owner("chat", chat_id), agent, model)
        now = time.time()
        new = core.new_turn(chat_id, text, now, pick)
        owner = new.rec.owner_id
        enqueued = await self._run_enqueue(new, now, if_failed=True, on_busy=mode)
        if enqueued.failed_last is not None:
            last = await self._record(owner, enqueued.failed_last)
            if last is not None and last.status == "failed" and same_text(last.text, text):
                return await self._retry_turn(last)
            enqueued = await self._run_enqueue(new, now, if_failed=False, on_busy=mode)
        if enqueued.busy is not None:
            raise Busy(chat_id, enqueued.busy)
        if enqueued.woken is not None:
            parked = await self._record(owner, enqueued.woken)
            if parked is not None:
                await self._send(parked)  # parked for approval, it holds no worker: it is started to stop
        if enqueued.inherited:  # the turn named no agent: it has the chat's, and goes to its queue
            new.rec.agent, new.rec.queue = enqueued.agent, enqueued.queue
        if enqueued.ahead == 0:
            await self._send(new.rec)
        return new.ref

    @_reaching
    async def agents(self) -> dict[str, Any]:
        """The agents the workers serve now (see `Client.agents`)."""
        return core.agents_answer(await self._agents.listed(fresh=True))

    async def _pick(self, owner: str, agent: str | None, model: str | None) -> core.AgentPick:
        return await self._agents.pick(owner, agent, model, self._last_turn)

    async def _run_enqueue(
        self, new: core.NewTurn, now: float, *, if_failed: bool, on_busy: OnBusy
    ) -> enqueue_script.Enqueued:
        call = enqueue_script.enqueue_call(
            new.rec.owner_id, new.rec.unit_id, new.fields, new.event, now, if_failed=if_failed, on_busy=on_busy
        )
        return enqueue_script.enqueued(await self._enqueue(keys=call.keys, args=call.args))

    async def _retry_turn(self, rec: UnitRecord) -> TurnRef:
        task_id = core.new_task_id()
        await self._requeue_failed(rec, task_id)
        pipe = self._store.pipeline(transaction=True)
        pipe.rpush(keys.queue(rec.owner_id), rec.unit_id)
        pipe.xadd(keys.events(rec.owner_id), {"e": core.retry_queued_event(rec)})
        await pipe.execute()
        await self._send(rec, task_id)
        return core.turn_ref(rec, task_id)

    async def _requeue_failed(self, rec: UnitRecord, task_id: str) -> None:
        now = time.time()
        fields = hash_mapping(core.requeue_fields(rec, task_id, now))
        await self._store.hset(keys.record(rec.owner_id, rec.unit_id), mapping=fields)
        await self._store.zadd(keys.pending(rec.owner_id), {rec.owner_id: now})

    @_reaching
    async def turn(self, chat_id: str, turn_id: str) -> TurnResult:
        """The turn's result now, without waiting."""
        owner = keys.owner("chat", core.check_id(chat_id, "chat_id"))
        rec = await self._record(owner, core.check_id(turn_id, "turn_id"))
        if rec is None:
            raise core.no_turn(chat_id, turn_id)
        return turn_result(rec)

    @_reaching
    async def wait(self, ref: TurnRef | RunRef, timeout: float = 60) -> Any:
        """Until the turn or run ends or waits for an approval (awaiting its owner's settled signal, not polling),
        or the timeout passes; the loop runs other work meanwhile."""
        owner, unit = core.wait_target(ref)
        deadline = time.monotonic() + timeout
        key = keys.settled(owner)
        pipe = self._store.pipeline(transaction=False)
        pipe.xrevrange(key, count=1)
        pipe.hgetall(keys.record(owner, unit))
        raw_tail, raw_rec = await pipe.execute()
        found_tail = stream_entries(raw_tail)
        rec = UnitRecord.from_hash(raw_rec)
        # The signal's entries after its tail as read with the record, from the client's one reader of them.
        news = self._settled.subscribe(key, found_tail[0][0] if found_tail else "0-0")
        try:
            while True:
                done = core.wait_over(rec, unit, timed_out=time.monotonic() >= deadline)
                if done is not None:
                    return done
                entries = await news.next(max(0.001, min(1.0, deadline - time.monotonic())))
                if core.settled_news(entries, unit):
                    rec = await self._record(owner, unit)
        finally:
            news.close()

    # -- either kind -----------------------------------------------------------------------------

    @_reaching
    async def retry(self, ident: str, *, kind: Kind | None = None) -> TurnRef | RunRef:
        """Re-run a chat's last failed turn or a failed run; resumes from a stored round if one is live."""
        owner = await self._owner(ident, kind)
        if owner.startswith("run:"):
            rec = await self._record(owner, ident)
            refused = core.retry_refused("run", ident, rec)
            if refused is not None:
                raise refused
            assert rec is not None
            task_id = core.new_task_id()
            await self._requeue_failed(rec, task_id)
            await self._send(rec, task_id)
            return RunRef(run_id=ident, task_id=task_id)
        last = await self._last_turn(owner)
        refused = core.retry_refused("chat", ident, last)
        if refused is not None:
            raise refused
        assert last is not None
        return await self._retry_turn(last)

    @_reaching
    async def stop(self, ident: str, *, kind: Kind | None = None) -> dict[str, Any]:
        """Ask the running (or queued) turn or run to stop; says so when there is nothing to stop."""
        owner = await self._owner(ident, kind)
        if owner.startswith("run:"):
            rec = await self._record(owner, ident)
        else:
            rec = await self._head_record(owner) or await self._last_turn(owner)
        answer = core.stop_answer(ident, rec)
        if answer is not None:
            return answer
        assert rec is not None
        await self._store.set(keys.stop(owner), rec.unit_id, ex=24 * 3600)
        if core.parked_for_approval(rec):
            record, pending = keys.record(rec.owner_id, rec.unit_id), keys.pending(rec.owner_id)
            if await self._store.eval(core.WAKE, 2, record, pending, rec.owner_id, repr(time.time())):
                await self._send(rec)  # a parked unit holds no worker to see the flag: it is started to stop
        return core.stop_requested(ident, rec)

    @_reaching
    async def transcript(self, ident: str, *, kind: Kind | None = None) -> list[Message]:
        """The chat's or run's messages in order (notices included)."""
        owner = await self._owner(ident, kind)
        return parse_transcript(await self._store.lrange(keys.transcript(owner), 0, -1))

    @_reaching
    async def events(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> list[Event]:
        """The chat's or run's events after `after` (exclusive), in order; live text is left out."""
        key = keys.events(await self._owner(ident, kind))
        return core.events_of(stream_entries(await self._store.xrange(key, f"({after}" if after else "-", "+")))

    @_reaching
    async def follow(
        self, ident: str, after: str | None = None, block_ms: int = 1000, *, kind: Kind | None = None
    ) -> list[Event]:
        """Events after `after`, waiting up to `block_ms` for the first one."""
        key = keys.events(await self._owner(ident, kind))
        found = await axread(self.redis, {key: after or "0-0"}, block=block_ms, count=500)
        return core.events_of(read_entries(found or []))

    async def stream(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> AsyncIterator[Event]:
        """What the SSE stream carries (every event and `text.delta`), after the event id `after` (exclusive;
        None: from the start of the retained history), live, until the caller stops iterating. The same reader
        as the HTTP stream (`tasks.store.tail`); an unreadable entry is skipped."""
        try:
            await self.learn_slots()
            owner = await self._owner(ident, kind)
            start = core.check_stream_id(after) if after else "0-0"
            async for stream_id, raw in tail(self.redis, keys.events(owner), start):
                event = core.stream_event(stream_id, raw)
                if event is not None:
                    yield event
        except STORE_ERRORS as err:
            raise Unavailable("store", self.settings, err) from err

    # -- approvals -------------------------------------------------------------------------------

    @_reaching
    async def approve(
        self, ident: str, tool_use_id: str, *, by: str | None = None, kind: Kind | None = None
    ) -> dict[str, Any]:
        """Approve a call that waits for approval; the unit resumes on any worker once all its calls are decided."""
        return await self._decide(ident, tool_use_id, "approved", reason=None, by=by, kind=kind)

    @_reaching
    async def deny(
        self,
        ident: str,
        tool_use_id: str,
        reason: str | None = None,
        *,
        by: str | None = None,
        kind: Kind | None = None,
    ) -> dict[str, Any]:
        """Deny a call that waits for approval: it never runs; the model reads `Denied by user[: reason]`."""
        return await self._decide(ident, tool_use_id, "denied", reason=core.check_reason(reason), by=by, kind=kind)

    async def _decide(
        self, ident: str, tool_use_id: str, decision: Decision, *, reason: str | None, by: str | None, kind: Kind | None
    ) -> dict[str, Any]:
        core.check_id(tool_use_id, "tool_use_id")
        by = core.check_by(by)
        owner = await self._owner(ident, kind)
        rec = await self._find_waiting(owner, tool_use_id)
        done: Decided | None = None
        if rec is not None:
            script_keys, args = decide_call(rec, tool_use_id, decision, reason=reason, by=by, now=time.time())
            done = decided(await self._store.eval(DECIDE, len(script_keys), *script_keys, *args), decision)
        answer = core.decision_answer(ident, tool_use_id, done)
        if done is not None and done.resume and rec is not None:
            await self._send(rec)
        return answer

    async def _find_waiting(self, owner: str, tool_use_id: str, *, recent: int = 20) -> UnitRecord | None:
        """`tasks.store.approvals.find_waiting`, on this client's I/O."""
        kind, _, ident = owner.partition(":")
        if kind == "run":
            return await self._record(owner, ident)
        for raw in reversed(await self._store.lrange(keys.turns(owner), -recent, -1)):
            turn_id = text_or_none(raw) or ""
            rec = await self._record(owner, turn_id)
            if rec is None:
                continue
            if waiting_call(rec, tool_use_id) or await self._store.hexists(keys.approvals(owner, turn_id), tool_use_id):
                return rec
        return None

    # -- coding runs -----------------------------------------------------------------------------

    @_reaching
    async def start_run(
        self,
        goal: str,
        workspace: str | os.PathLike[str],
        run_id: str | None = None,
        *,
        agent: str | None = None,
        model: str | None = None,
    ) -> RunRef:
        """Start a coding run in `workspace` (a directory on the workers' machine), by `agent` with `model`."""
        core.check_text(goal, self.settings.max_text_chars)
        path = core.check_workspace(workspace)
        pick = await self._pick(keys.owner("run", "-"), agent, model)
        ident = core.check_id(run_id, "run_id") if run_id is not None else None
        rec = core.new_run(goal, path, ident, time.time(), pick)
        owner, run_id = rec.owner_id, rec.unit_id
        if not await self._store.hsetnx(keys.record(owner, run_id), "kind", '"run"'):
            raise ValidationError(f"run {run_id} already exists")
        await self._store.hset(keys.record(owner, run_id), mapping=hash_mapping(rec.to_hash()))
        await self._store.sadd(keys.runs(owner), run_id)
        await self._store.zadd(keys.pending(owner), {owner: rec.created_at})
        await self._send(rec)
        return RunRef(run_id=run_id, task_id=rec.task_id)

    @_reaching
    async def run_status(self, run_id: str) -> RunStatus:
        """The run's status now."""
        rec = await self._record(keys.owner("run", core.check_id(run_id, "run_id")), run_id)
        if rec is None:
            raise core.no_run(run_id)
        return run_status(rec)
