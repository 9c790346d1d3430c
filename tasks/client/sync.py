"""`Client`, the synchronous client: send, wait, retry, stop, read transcripts, events, runs and chats.

`AsyncClient` (async_client.py) is the same API as coroutines. Both are thin shells doing I/O around the I/O-free
core in core.py.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from agent.events import Event
from agent.messages import Message
from config.settings import Settings, load_settings
from tasks.client import agent_pick, core, kept
from tasks.client.agent_picker import AgentPicker
from tasks.client.attachments import Attachment, check_attachments
from tasks.client.budgets import Budgets
from tasks.client.core import (
    Busy,
    Kind,
    OnBusy,
    SettledTails,
    ValidationError,
)
from tasks.client.publisher import Publisher
from tasks.client.waiting import wait_settled
from tasks.reach import STORE_ERRORS, Unavailable
from tasks.store import deletion, keys
from tasks.store.approvals import Decision, decide, find_waiting
from tasks.store.connect import STORE_CONNECT_TIMEOUT, new_store_client
from tasks.store.enqueue import Enqueue
from tasks.store.files import read as read_file
from tasks.store.files import store as store_files
from tasks.store.listing import Page, read_page
from tasks.store.reads import chat_head, load_record, load_transcript
from tasks.store.records import RunRef, RunStatus, TurnRef, TurnResult, UnitRecord, run_status, turn_result
from tasks.store.replies import hash_mapping, read_entries, stream_entries, text
from tasks.store.xread import xread

P = ParamSpec("P")
R = TypeVar("R")

def _reaching(method: Callable[P, R]) -> Callable[P, R]:
    """The store's connection errors leave a public method as `Unavailable`, naming the store."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except STORE_ERRORS as err:
            client = args[0]
            assert isinstance(client, Client)
            raise Unavailable("store", client.settings, err) from err

    return guarded


class Client(Budgets):
    """The synchronous client (see the module); `AsyncClient` is the same API as coroutines."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        self.redis = new_store_client(self.settings, socket_connect_timeout=STORE_CONNECT_TIMEOUT)
        self._publisher = Publisher(self.settings)
        self._celery = self._publisher.celery
        self._enqueue = Enqueue(self.redis)
        self._tails = SettledTails()
        self._agents = AgentPicker(lambda: self.redis, self.settings.agent_wait)

    def close(self) -> None:
        self.redis.close()

    # -- chat turns ------------------------------------------------------------------------------

    @_reaching
    def send_message(
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
        """Enqueue a turn. Re-sending the text of the chat's failed last turn retries that turn instead.

        `on_busy` says what happens when the chat has a turn queued or running: `enqueue` runs the new one after
        them; `interrupt` stops them (the notice `Interrupted by a new message.`) and runs it next; `reject`
        enqueues nothing and raises `Busy` naming the chat's current turn. `agent` switches the chat to that
        agent from this turn on (None: the chat's, else the fleet's default); `model` is one of its `models`.
        `user`: whose message it is; a chat belongs to the user its first message named (`chats(user=...)`).
        `files`: `Attachment`s (images and PDFs), checked before anything is enqueued and stored beside the chat.
        """
        core.check_id(chat_id, "chat_id")
        core.check_text(text, self.settings.max_text_chars)
        mode = core.check_on_busy(on_busy)
        user = kept.check_user(user)
        attached = check_attachments(files, self.settings.max_file_bytes)
        pick = self._pick(keys.owner("chat", chat_id), agent, model)
        now = time.time()
        new = core.new_turn(chat_id, text, now, pick, user=user, files=attached.blocks)
        owner, turn_id = new.rec.owner_id, new.rec.unit_id
        store_files(self.redis, owner, attached.contents)  # before the turn that reads them can run
        # Its task message, for the enqueue to publish with the turn when the broker is the store (else nothing).
        message = self._publisher.prepared(new.rec, new.rec.task_id)
        enqueued = self._enqueue(
            self.redis, owner, turn_id, new.fields, new.event, now, if_failed=True, on_busy=mode, message=message
        )
        if enqueued.failed_last is not None:  # the last turn failed: the same text retries it, other text is new
            last = load_record(self.redis, owner, enqueued.failed_last)
            if last is not None and last.status == "failed" and core.same_message(last, text, attached.blocks):
                return self._retry_turn(last)
            enqueued = self._enqueue(
                self.redis, owner, turn_id, new.fields, new.event, now, if_failed=False, on_busy=mode, message=message
            )
        self._publisher.heard(enqueued.listeners)
        if enqueued.busy is not None:
            raise Busy(chat_id, enqueued.busy)
        if enqueued.woken is not None:
            parked = load_record(self.redis, owner, enqueued.woken)
            if parked is not None:
                self._send(parked)  # parked for approval, it holds no worker: it is started to stop
        if enqueued.inherited:  # the turn named no agent: it has the chat's, and goes to its queue
            new.rec.agent, new.rec.queue = enqueued.agent, enqueued.queue
        if enqueued.settled_tail is not None:
            self._tails.note(owner, turn_id, enqueued.settled_tail)
        if enqueued.ahead == 0 and not enqueued.published:
            self._send(new.rec)
        # Else a turn ahead of it is unfinished, and the settle of the turn just ahead publishes it (the settle reads
        # the queue inside its fenced write, atomic with this enqueue): published now, its message would only be
        # delivered, found not at the head and dropped. A hand-off lost to a crash is made by the settled turn's
        # message coming back (retried, redelivered: it finds its turn finished), and on a Redis broker by the sweep.
        return new.ref

    def agents(self) -> dict[str, Any]:
        """The agents the workers serve now: `{"agents": [...]}`, each with its version, models, tools and the
        workers serving it (as `baton agents --json`)."""
        return agent_pick.agents_answer(self._agents.listed(fresh=True))

    def _pick(self, owner: str, agent: str | None, model: str | None) -> core.AgentPick:
        return self._agents.pick(owner, agent, model, self._last_turn)

    def _last_turn(self, owner: str) -> UnitRecord | None:
        last = self.redis.lindex(keys.turns(owner), -1)
        return load_record(self.redis, owner, text(last)) if last else None

    def _retry_turn(self, rec: UnitRecord) -> TurnRef:
        task_id = core.new_task_id()
        self._requeue_failed(rec, task_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.rpush(keys.queue(rec.owner_id), rec.unit_id)
        pipe.xadd(keys.events(rec.owner_id), {"e": core.retry_queued_event(rec)})
        pipe.execute()
        self._send(rec, task_id)
        return core.turn_ref(rec, task_id)

    def _requeue_failed(self, rec: UnitRecord, task_id: str) -> None:
        now = time.time()
        self.redis.hset(
            keys.record(rec.owner_id, rec.unit_id), mapping=hash_mapping(core.requeue_fields(rec, task_id, now))
        )
        self.redis.zadd(keys.pending(rec.owner_id), {rec.owner_id: now})

    @_reaching
    def turn(self, chat_id: str, turn_id: str) -> TurnResult:
        """The turn's result now, without waiting."""
        owner = keys.owner("chat", core.check_id(chat_id, "chat_id"))
        rec = load_record(self.redis, owner, core.check_id(turn_id, "turn_id"))
        if rec is None:
            raise core.no_turn(chat_id, turn_id)
        return turn_result(rec)

    @_reaching
    def wait(self, ref: TurnRef | RunRef, timeout: float = 60) -> Any:
        """Block until the turn or run ends or waits for an approval (awaiting its owner's settled signal, not
        polling), or the timeout passes."""
        owner, unit = core.wait_target(ref)
        deadline = time.monotonic() + timeout
        return wait_settled(self.redis, owner, unit, deadline, self._tails.take(owner, unit))

    # -- either kind -----------------------------------------------------------------------------

    def _owner(self, ident: str, kind: Kind | None = None) -> str:
        """`chat:ID` or `run:ID`: as `kind` says, else a run when one by that id exists, else a chat."""
        core.check_id(ident, "id")
        exists = None if kind is not None else bool(self.redis.exists(keys.record(keys.owner("run", ident), ident)))
        return core.owner_of(ident, kind, exists)

    @_reaching
    def retry(self, ident: str, *, kind: Kind | None = None) -> TurnRef | RunRef:
        """Re-run a chat's last failed turn or a failed run; resumes from a stored round if one is live.

        `kind` ("chat" or "run") says which one `ident` names, where a chat and a run may share an id.
        """
        owner = self._owner(ident, kind)
        if owner.startswith("run:"):
            rec = load_record(self.redis, owner, ident)
            refused = core.retry_refused("run", ident, rec)
            if refused is not None:
                raise refused
            assert rec is not None
            task_id = core.new_task_id()
            self._requeue_failed(rec, task_id)
            self._send(rec, task_id)
            return RunRef(run_id=ident, task_id=task_id)
        last = self._last_turn(owner)
        refused = core.retry_refused("chat", ident, last)
        if refused is not None:
            raise refused
        assert last is not None
        return self._retry_turn(last)

    @_reaching
    def stop(self, ident: str, *, kind: Kind | None = None) -> dict[str, Any]:
        """Ask the running (or queued) turn or run to stop; says so when there is nothing to stop."""
        owner = self._owner(ident, kind)
        if owner.startswith("run:"):
            rec = load_record(self.redis, owner, ident)
        else:
            head = chat_head(self.redis, owner)
            rec = load_record(self.redis, owner, head) if head else self._last_turn(owner)
        answer = core.stop_answer(ident, rec)
        if answer is not None:
            return answer
        assert rec is not None
        self.redis.set(keys.stop(owner), rec.unit_id, ex=24 * 3600)
        if core.parked_for_approval(rec) and self._wake_parked(rec):
            # A parked unit holds no worker to see the flag: it is started to stop (its journaled rounds replay).
            self._send(rec)
        return core.stop_requested(ident, rec)

    def _wake_parked(self, rec: UnitRecord) -> bool:
        """Move a unit parked for approval back to `queued` (once: a decision racing this sees it is not waiting)."""
        record = keys.record(rec.owner_id, rec.unit_id)
        return bool(self.redis.eval(core.WAKE, 2, record, keys.pending(rec.owner_id), rec.owner_id, repr(time.time())))

    @_reaching
    def transcript(self, ident: str, *, kind: Kind | None = None) -> list[Message]:
        """The chat's or run's messages in order (notices included)."""
        return load_transcript(self.redis, self._owner(ident, kind))

    @_reaching
    def file(self, chat_id: str, sha256: str) -> tuple[bytes, str]:
        """A file a message of the chat carries, by its SHA-256: its bytes and media type (`NotFound` if none)."""
        core.check_id(chat_id, "chat_id")
        data = read_file(self.redis, keys.owner("chat", chat_id), sha256.lower())
        return core.served_file(chat_id, sha256, data)

    @_reaching
    def events(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> list[Event]:
        """The chat's or run's events after `after` (exclusive), in order; live text is left out."""
        key = keys.events(self._owner(ident, kind))
        return core.events_of(stream_entries(self.redis.xrange(key, f"({after}" if after else "-", "+")))

    @_reaching
    def follow(
        self, ident: str, after: str | None = None, block_ms: int = 1000, *, kind: Kind | None = None
    ) -> list[Event]:
        """Events after `after`, waiting up to `block_ms` for the first one."""
        key = keys.events(self._owner(ident, kind))
        found = xread(self.redis, {key: after or "0-0"}, block=block_ms, count=500)
        return core.events_of(read_entries(found or []))

    # -- approvals -------------------------------------------------------------------------------

    @_reaching
    def approve(
        self, ident: str, tool_use_id: str, *, by: str | None = None, kind: Kind | None = None
    ) -> dict[str, Any]:
        """Approve a call that waits for approval; the unit resumes on any worker once all its calls are decided."""
        return self._decide(ident, tool_use_id, "approved", reason=None, by=by, kind=kind)

    @_reaching
    def deny(
        self,
        ident: str,
        tool_use_id: str,
        reason: str | None = None,
        *,
        by: str | None = None,
        kind: Kind | None = None,
    ) -> dict[str, Any]:
        """Deny a call that waits for approval: it never runs; the model reads `Denied by user[: reason]`."""
        return self._decide(ident, tool_use_id, "denied", reason=core.check_reason(reason), by=by, kind=kind)

    def _decide(
        self, ident: str, tool_use_id: str, decision: Decision, *, reason: str | None, by: str | None, kind: Kind | None
    ) -> dict[str, Any]:
        core.check_id(tool_use_id, "tool_use_id")
        by = core.check_by(by)
        owner = self._owner(ident, kind)
        rec = find_waiting(self.redis, owner, tool_use_id)
        done = decide(self.redis, rec, tool_use_id, decision, reason=reason, by=by) if rec is not None else None
        answer = core.decision_answer(ident, tool_use_id, done)
        if done is not None and done.resume and rec is not None:
            # The record already says queued and the unit is in keys.PENDING: if this send is lost, the sweep sends it.
            self._send(rec)
        return answer

    def _send(self, rec: UnitRecord, task_id: str | None = None) -> None:
        self._publisher.send(self.redis, rec, task_id)

    # -- coding runs -----------------------------------------------------------------------------

    @_reaching
    def start_run(
        self,
        goal: str,
        workspace: str | os.PathLike[str],
        run_id: str | None = None,
        *,
        agent: str | None = None,
        model: str | None = None,
        user: str | None = None,
    ) -> RunRef:
        """Start a coding run in `workspace` (a directory on the workers' machine), by `agent` (None: the fleet's
        default) with `model` (one of its `models`; None: its own), owned by `user` (`runs(user=...)`)."""
        core.check_text(goal, self.settings.max_text_chars)
        path = core.check_workspace(workspace)
        user = kept.check_user(user)
        pick = self._pick(keys.owner("run", "-"), agent, model)
        ident = core.check_id(run_id, "run_id") if run_id is not None else None
        rec = core.new_run(goal, path, ident, time.time(), pick, user=user)
        owner, run_id = rec.owner_id, rec.unit_id
        if not self.redis.hsetnx(keys.record(owner, run_id), "kind", '"run"'):
            raise ValidationError(f"run {run_id} already exists")
        pipe = self.redis.pipeline(transaction=True)  # one slot on a cluster: the record and its index entries
        pipe.hset(keys.record(owner, run_id), mapping=hash_mapping(rec.to_hash()))
        for index in [keys.pending(owner), *kept.run_indexes(rec)]:
            pipe.zadd(index, {owner: rec.created_at})
        pipe.execute()
        self._send(rec)
        return RunRef(run_id=run_id, task_id=rec.task_id)

    @_reaching
    def run_status(self, run_id: str) -> RunStatus:
        """The run's status now."""
        rec = load_record(self.redis, keys.owner("run", core.check_id(run_id, "run_id")), run_id)
        if rec is None:
            raise core.no_run(run_id)
        return run_status(rec)

    # -- what a product keeps, lists and deletes ---------------------------------------------------

    @_reaching
    def chats(self, user: str | None = None, limit: int = 50, before: str | None = None) -> Page:
        """A page of chats, newest activity first (every user's when `user` is None); `before`: a page's `next`."""
        return read_page(self.redis, "chat", *kept.page_args("chat", user, limit, before))

    @_reaching
    def runs(self, user: str | None = None, limit: int = 50, before: str | None = None) -> Page:
        """A page of runs, as `chats`."""
        return read_page(self.redis, "run", *kept.page_args("run", user, limit, before))

    @_reaching
    def delete(
        self, ident: str, stop: bool = False, *, kind: Kind | None = None, timeout: float = kept.DELETE_WAIT
    ) -> dict[str, Any]:
        """Delete a chat or run: every key of it and its index entries. `Busy` while a turn or the run is queued,
        running or waiting, unless `stop`: then it is stopped and deleted once settled (waiting up to `timeout`;
        past it `{"deleted": false, "stopping": true}` and the sweep deletes it when it has settled)."""
        owner = self._owner(ident, kind)
        done = deletion.delete(self.redis, owner)
        if done.busy is not None and stop:
            self.redis.zadd(keys.doomed(owner), {owner: time.time()})
            deadline = time.monotonic() + timeout
            while done.busy is not None and time.monotonic() < deadline:
                self.stop(ident, kind=kept.kind_of(owner))  # the head now: turns queued behind it start, then stop
                time.sleep(kept.DELETE_POLL)
                done = deletion.delete(self.redis, owner)
            if done.busy is not None:
                return kept.delete_stopping(ident)
            return kept.delete_answer(ident, deletion.Deleted(deleted=True))  # by us, or by the sweep just before
        if done.busy is not None:
            raise kept.busy_to_delete(ident, done.busy)
        return kept.delete_answer(ident, done)
