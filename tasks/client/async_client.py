"""`AsyncClient`: every method of `Client` as a coroutine, with the same arguments, results and errors.

The store is read and written with `redis.asyncio`; every decision in between is `tasks/client/core.py`'s, the
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
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agent.events import Event
from agent.messages import Message
from tasks.client import agent_pick, core, kept
from tasks.client.async_approvals import AsyncApprovals
from tasks.client.async_base import reaching
from tasks.client.attachments import Attachment, check_attachments
from tasks.client.budgets import AsyncBudgets
from tasks.client.core import Busy, Kind, OnBusy, ValidationError
from tasks.reach import STORE_ERRORS, Unavailable
from tasks.store import deletion, keys
from tasks.store import enqueue as enqueue_script
from tasks.store.fenced import Batch
from tasks.store.files import read_async as read_file
from tasks.store.files import store_async as store_files
from tasks.store.listing import Page, aread_page
from tasks.store.reads import parse_transcript
from tasks.store.records import RunRef, RunStatus, TurnRef, TurnResult, UnitRecord, run_status, turn_result
from tasks.store.replies import hash_mapping, read_entries, stream_entries
from tasks.store.tail import tail
from tasks.store.xread import axread

__all__ = ["AsyncClient"]


PUBLISH_THREADS = 4  # broker connections a burst of sends may hold at once (Celery's producer pool hands them out)


class AsyncClient(AsyncApprovals, AsyncBudgets):
    """The asyncio client: `await ac.send_message(...)`, `await ac.wait(ref)`, `async for e in ac.stream(id)`.

    Made outside a loop or in one; it connects lazily, inside the loop that first uses it. `await ac.aclose()`
    (or `async with AsyncClient() as ac`) releases its connections and threads. Its plumbing is
    `tasks/client/async_base.py`'s, its approvals `tasks/async_approvals.py`'s, its budgets `tasks/client/budgets.py`'s.
    """

    # -- chat turns ------------------------------------------------------------------------------

    @reaching
    async def send_message(
        self,
        chat_id: str,
        text: str,
        on_busy: OnBusy = "enqueue",
        *,
        agent: str | None = None,
        model: str | None = None,
        user: str | None = None,
        files: Sequence[Attachment] | None = None,
    ) -> TurnRef:
        """Enqueue a turn (see `Client.send_message`, `on_busy`, `agent`, `model`, `user` and `files` included)."""
        core.check_id(chat_id, "chat_id")
        core.check_text(text, self.settings.max_text_chars)
        mode = core.check_on_busy(on_busy)
        user = kept.check_user(user)
        attached = check_attachments(files, self.settings.max_file_bytes)
        pick = await self._pick(keys.owner("chat", chat_id), agent, model)
        now = time.time()
        new = core.new_turn(chat_id, text, now, pick, user=user, files=attached.blocks)
        owner = new.rec.owner_id
        await store_files(self._store, owner, attached.contents)  # before the turn that reads them can run
        message = await self._prepared(new.rec)  # for the enqueue to publish with the turn (see `Client`)
        enqueued = await self._run_enqueue(new, now, if_failed=True, on_busy=mode, message=message)
        if enqueued.failed_last is not None:
            last = await self._record(owner, enqueued.failed_last)
            if last is not None and last.status == "failed" and core.same_message(last, text, attached.blocks):
                return await self._retry_turn(last)
            enqueued = await self._run_enqueue(new, now, if_failed=False, on_busy=mode, message=message)
        self._publisher.heard(enqueued.listeners)
        if enqueued.busy is not None:
            raise Busy(chat_id, enqueued.busy)
        if enqueued.woken is not None:
            parked = await self._record(owner, enqueued.woken)
            if parked is not None:
                await self._send(parked)  # parked for approval, it holds no worker: it is started to stop
        if enqueued.inherited:  # the turn named no agent: it has the chat's, and goes to its queue
            new.rec.agent, new.rec.queue = enqueued.agent, enqueued.queue
        if enqueued.settled_tail is not None:
            self._tails.note(owner, new.rec.unit_id, enqueued.settled_tail)
        if enqueued.ahead == 0 and not enqueued.published:
            await self._send(new.rec)
        return new.ref

    @reaching
    async def agents(self) -> dict[str, Any]:
        """The agents the workers serve now (see `Client.agents`)."""
        return agent_pick.agents_answer(await self._agents.listed(fresh=True))

    async def _pick(self, owner: str, agent: str | None, model: str | None) -> core.AgentPick:
        return await self._agents.pick(owner, agent, model, self._last_turn)

    async def _run_enqueue(
        self, new: core.NewTurn, now: float, *, if_failed: bool, on_busy: OnBusy, message: Batch
    ) -> enqueue_script.Enqueued:
        call = enqueue_script.enqueue_call(
            new.rec.owner_id, new.rec.unit_id, new.fields, new.event, now, if_failed=if_failed, on_busy=on_busy,
            message=message,
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

    @reaching
    async def turn(self, chat_id: str, turn_id: str) -> TurnResult:
        """The turn's result now, without waiting."""
        owner = keys.owner("chat", core.check_id(chat_id, "chat_id"))
        rec = await self._record(owner, core.check_id(turn_id, "turn_id"))
        if rec is None:
            raise core.no_turn(chat_id, turn_id)
        return turn_result(rec)

    @reaching
    async def wait(self, ref: TurnRef | RunRef, timeout: float = 60) -> Any:
        """Until the turn or run ends or waits for an approval (awaiting its owner's settled signal, not polling),
        or the timeout passes; the loop runs other work meanwhile."""
        owner, unit = core.wait_target(ref)
        deadline = time.monotonic() + timeout
        key = keys.settled(owner)
        tail = self._tails.take(owner, unit)
        read = tail is None  # whether `rec` holds the record as read (None then: there is no such unit)
        rec: UnitRecord | None = None
        if tail is None:
            pipe = self._store.pipeline(transaction=False)
            pipe.xrevrange(key, count=1)
            pipe.hgetall(keys.record(owner, unit))
            raw_tail, raw_rec = await pipe.execute()
            found_tail = stream_entries(raw_tail)
            tail = found_tail[0][0] if found_tail else "0-0"
            rec = UnitRecord.from_hash(raw_rec)
        # The signal's entries after its tail (as read with the record, or when this client enqueued the unit: every
        # ending or park of it comes after), from the client's one reader of them.
        news = self._settled.subscribe(key, tail)
        try:
            while True:
                timed_out = time.monotonic() >= deadline
                if not read and timed_out:
                    rec, read = await self._record(owner, unit), True
                if read:
                    done = core.wait_over(rec, unit, timed_out=timed_out)
                    if done is not None:
                        return done
                entries = await news.next(max(0.001, min(1.0, deadline - time.monotonic())))
                if core.settled_news(entries, unit):
                    rec, read = await self._record(owner, unit), True
        finally:
            news.close()

    # -- either kind -----------------------------------------------------------------------------

    @reaching
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

    @reaching
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

    @reaching
    async def transcript(self, ident: str, *, kind: Kind | None = None) -> list[Message]:
        """The chat's or run's messages in order (notices included)."""
        owner = await self._owner(ident, kind)
        return parse_transcript(await self._store.lrange(keys.transcript(owner), 0, -1))

    @reaching
    async def file(self, chat_id: str, sha256: str) -> tuple[bytes, str]:
        """A file a message of the chat carries, by its SHA-256: its bytes and media type (`NotFound` if none)."""
        core.check_id(chat_id, "chat_id")
        data = await read_file(self._store, keys.owner("chat", chat_id), sha256.lower())
        return core.served_file(chat_id, sha256, data)

    @reaching
    async def events(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> list[Event]:
        """The chat's or run's events after `after` (exclusive), in order; live text is left out."""
        key = keys.events(await self._owner(ident, kind))
        return core.events_of(stream_entries(await self._store.xrange(key, f"({after}" if after else "-", "+")))

    @reaching
    async def follow(
        self, ident: str, after: str | None = None, block_ms: int = 1000, *, kind: Kind | None = None
    ) -> list[Event]:
        """Events after `after`, waiting up to `block_ms` for the first one."""
        key = keys.events(await self._owner(ident, kind))
        found = await axread(self.redis, {key: after or "0-0"}, block=block_ms, count=500)
        return core.events_of(read_entries(found or []))

    async def stream(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> AsyncIterator[Event]:
        """What the SSE stream carries (every event, `text.delta` and `reasoning.delta`), after the event id `after`
        (exclusive; None: from the start of the retained history), live, until the caller stops iterating. The same
        reader as the HTTP stream (`tasks.store.tail`); an unreadable entry is skipped."""
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

    # -- coding runs -----------------------------------------------------------------------------

    @reaching
    async def start_run(
        self,
        goal: str,
        workspace: str | os.PathLike[str],
        run_id: str | None = None,
        *,
        agent: str | None = None,
        model: str | None = None,
        user: str | None = None,
    ) -> RunRef:
        """Start a coding run in `workspace` (a directory on the workers' machine), by `agent` with `model`, owned
        by `user`."""
        core.check_text(goal, self.settings.max_text_chars)
        path = core.check_workspace(workspace)
        user = kept.check_user(user)
        pick = await self._pick(keys.owner("run", "-"), agent, model)
        ident = core.check_id(run_id, "run_id") if run_id is not None else None
        rec = core.new_run(goal, path, ident, time.time(), pick, user=user)
        owner, run_id = rec.owner_id, rec.unit_id
        if not await self._store.hsetnx(keys.record(owner, run_id), "kind", '"run"'):
            raise ValidationError(f"run {run_id} already exists")
        pipe = self._store.pipeline(transaction=True)  # one slot on a cluster: the record and its index entries
        pipe.hset(keys.record(owner, run_id), mapping=hash_mapping(rec.to_hash()))
        for index in [keys.pending(owner), *kept.run_indexes(rec)]:
            pipe.zadd(index, {owner: rec.created_at})
        await pipe.execute()
        await self._send(rec)
        return RunRef(run_id=run_id, task_id=rec.task_id)

    @reaching
    async def run_status(self, run_id: str) -> RunStatus:
        """The run's status now."""
        rec = await self._record(keys.owner("run", core.check_id(run_id, "run_id")), run_id)
        if rec is None:
            raise core.no_run(run_id)
        return run_status(rec)

    # -- what a product keeps, lists and deletes ---------------------------------------------------

    @reaching
    async def chats(self, user: str | None = None, limit: int = 50, before: str | None = None) -> Page:
        """A page of chats, newest activity first (see `Client.chats`)."""
        return await aread_page(self._store, "chat", *kept.page_args("chat", user, limit, before))

    @reaching
    async def runs(self, user: str | None = None, limit: int = 50, before: str | None = None) -> Page:
        """A page of runs, newest activity first (see `Client.runs`)."""
        return await aread_page(self._store, "run", *kept.page_args("run", user, limit, before))

    @reaching
    async def delete(
        self, ident: str, stop: bool = False, *, kind: Kind | None = None, timeout: float = kept.DELETE_WAIT
    ) -> dict[str, Any]:
        """Delete a chat or run (see `Client.delete`)."""
        owner = await self._owner(ident, kind)
        done = await self._delete(owner)
        if done.busy is not None and stop:
            await self._store.zadd(keys.doomed(owner), {owner: time.time()})
            deadline = time.monotonic() + timeout
            while done.busy is not None and time.monotonic() < deadline:
                await self.stop(ident, kind=kept.kind_of(owner))
                await asyncio.sleep(kept.DELETE_POLL)
                done = await self._delete(owner)
            if done.busy is not None:
                return kept.delete_stopping(ident)
            return kept.delete_answer(ident, deletion.Deleted(deleted=True))  # by us, or by the sweep just before
        if done.busy is not None:
            raise kept.busy_to_delete(ident, done.busy)
        return kept.delete_answer(ident, done)

    async def _delete(self, owner: str) -> deletion.Deleted:
        script_keys, args = deletion.delete_call(owner)
        return deletion.deleted(await self._store.eval(deletion.SCRIPT, len(script_keys), *script_keys, *args))
