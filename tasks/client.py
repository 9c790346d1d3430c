"""The Python client a web app calls: send, wait, retry, stop, read transcripts, events and runs."""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar

from agent.events import TEXT_DELTA, Event, decode_event, encode_event
from agent.messages import Message
from agent.rounds import same_text
from config.settings import Settings, load_settings
from tasks.publisher import Publisher
from tasks.reach import STORE_ERRORS, Unavailable
from tasks.store import keys, settled
from tasks.store.approvals import Decision, decide, find_waiting
from tasks.store.connect import new_store_client
from tasks.store.enqueue import Enqueue
from tasks.store.reads import chat_head, load_record, load_transcript
from tasks.store.records import (
    RunRef,
    RunStatus,
    TurnRef,
    TurnResult,
    UnitRecord,
    run_status,
    turn_result,
)
from tasks.store.replies import hash_mapping, read_entries, stream_entries, text

__all__ = ["Client", "NotFound", "Unavailable", "ValidationError"]

P = ParamSpec("P")
R = TypeVar("R")

# A client that cannot reach the store says so within seconds instead of waiting on the kernel's connect timeout.
STORE_CONNECT_TIMEOUT = 5.0

Kind = Literal["chat", "run"]

# KEYS: record, PENDING. ARGV: owner id, now. Only a unit still parked for approval is woken.
_WAKE = """
if redis.call('HGET', KEYS[1], 'status') ~= '"waiting"' or redis.call('HGET', KEYS[1], 'waiting_reason') ~= '"approval"'
then return 0 end
redis.call('HSET', KEYS[1], 'status', '"queued"', 'waiting_reason', 'null', 'updated_at', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""


_SETTLED_FIELD = settled.FIELD.encode()


class ValidationError(ValueError):
    """Bad input, refused before anything is enqueued."""


class NotFound(LookupError):
    """No chat turn or run by that id."""


BY_MAX = 200


def _check_by(value: object) -> str | None:
    """Who decided, as the caller names them: a name on one line, at most `BY_MAX` characters, outer blanks
    dropped; None (or blank) when nobody is named (the event then says "someone"). It is what the caller says,
    not an identity Baton checked: anyone who may decide may give any name."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value.strip()) > BY_MAX or any(c < " " or c == "\x7f" for c in value):
        raise ValidationError(f"by must be a name on one line of at most {BY_MAX} characters")
    return value.strip() or None


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


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not keys.ID_PATTERN.match(value):
        raise ValidationError(
            f"{what} must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit;"
            f" got {value!r}"
        )
    return value


class Client:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        self.redis = new_store_client(self.settings, socket_connect_timeout=STORE_CONNECT_TIMEOUT)
        self._publisher = Publisher(self.settings)
        self._celery = self._publisher.celery
        self._enqueue = Enqueue(self.redis)

    def close(self) -> None:
        self.redis.close()

    # -- chat turns ------------------------------------------------------------------------------

    def _check_text(self, text: object) -> str:
        if not isinstance(text, str):
            raise ValidationError("text must be a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValidationError("text is not valid UTF-8") from err
        if not text.strip():
            raise ValidationError("text is empty")
        if len(text) > self.settings.max_text_chars:
            raise ValidationError(f"text is {len(text)} characters; the limit is {self.settings.max_text_chars}")
        return text

    @_reaching
    def send_message(self, chat_id: str, text: str) -> TurnRef:
        """Enqueue a turn. Re-sending the text of the chat's failed last turn retries that turn instead."""
        _check_id(chat_id, "chat_id")
        self._check_text(text)
        owner = keys.owner("chat", chat_id)
        turn_id = f"t-{uuid.uuid4().hex[:16]}"
        task_id = str(uuid.uuid4())
        now = time.time()
        rec = UnitRecord(
            kind="turn", owner_id=owner, unit_id=turn_id, text=text, task_id=task_id, created_at=now, updated_at=now
        )
        fields, event = rec.to_hash(), encode_event("turn.queued", owner, {"turn_id": turn_id}, at=now)
        enqueued = self._enqueue(self.redis, owner, turn_id, fields, event, now, if_failed=True)
        if enqueued.failed_last is not None:  # the last turn failed: the same text retries it, other text is new
            last = load_record(self.redis, owner, enqueued.failed_last)
            if last is not None and last.status == "failed" and same_text(last.text, text):
                return self._retry_turn(last)
            enqueued = self._enqueue(self.redis, owner, turn_id, fields, event, now, if_failed=False)
        if enqueued.ahead == 0:
            self._send(rec)
        # Else a turn ahead of it is unfinished, and the settle of the turn just ahead publishes it (the settle reads
        # the queue inside its fenced write, atomic with this enqueue): published now, its message would only be
        # delivered, found not at the head and dropped. A hand-off lost to a crash is the lost-message sweep's.
        return TurnRef(chat_id=chat_id, turn_id=turn_id, task_id=task_id)

    def _last_turn(self, owner: str) -> UnitRecord | None:
        last = self.redis.lindex(keys.turns(owner), -1)
        return load_record(self.redis, owner, text(last)) if last else None

    def _retry_turn(self, rec: UnitRecord) -> TurnRef:
        task_id = str(uuid.uuid4())
        self._requeue_failed(rec, task_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.rpush(keys.queue(rec.owner_id), rec.unit_id)
        pipe.xadd(
            keys.events(rec.owner_id),
            {"e": encode_event("turn.queued", rec.owner_id, {"turn_id": rec.unit_id, "retry": True})},
        )
        pipe.execute()
        self._send(rec, task_id)
        return TurnRef(chat_id=rec.owner_id.partition(":")[2], turn_id=rec.unit_id, task_id=task_id)

    def _requeue_failed(self, rec: UnitRecord, task_id: str) -> None:
        # A unit that failed before it ever started (its publish failed) is started afresh: its first generation
        # still has to write the user's message. Any other starts a new generation that may resume a stored round.
        never_started = rec.generation == 0 and rec.history_len < 0
        self.redis.hset(
            keys.record(rec.owner_id, rec.unit_id),
            mapping={
                "status": json.dumps("queued"),
                "generation": json.dumps(rec.generation if never_started else rec.generation + 1),
                "resume_pending": json.dumps(not never_started),
                "history_len": "-1",
                "failure": "null",
                "task_id": json.dumps(task_id),
                "committed": "0",
                "updated_at": json.dumps(time.time()),
            },
        )
        self.redis.zadd(keys.PENDING, {rec.owner_id: time.time()})

    @_reaching
    def turn(self, chat_id: str, turn_id: str) -> TurnResult:
        rec = load_record(self.redis, keys.owner("chat", _check_id(chat_id, "chat_id")), _check_id(turn_id, "turn_id"))
        if rec is None:
            raise NotFound(f"no turn {turn_id} in chat {chat_id}")
        return turn_result(rec)

    @_reaching
    def wait(self, ref: TurnRef | RunRef, timeout: float = 60) -> Any:
        """Block until the turn or run ends or waits for an approval (awaiting its owner's settled signal, not
        polling), or the timeout passes."""
        if isinstance(ref, RunRef):
            owner, unit = keys.owner("run", ref.run_id), ref.run_id
        else:
            owner, unit = keys.owner("chat", ref.chat_id), ref.turn_id
        deadline = time.monotonic() + timeout
        key = keys.settled(owner)
        # One round trip; the signal's tail is read before the record, so no later ending or park is missed.
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrevrange(key, count=1)
        pipe.hgetall(keys.record(owner, unit))
        raw_tail, raw_rec = pipe.execute()
        tail = stream_entries(raw_tail)
        last_id = tail[0][0] if tail else "0-0"
        rec = UnitRecord.from_hash(raw_rec)  # the record is the truth; the signal only says when to read it
        while True:
            if rec is None:
                raise NotFound(f"no such turn or run: {unit}")
            # A unit parked for approval waits for a person, not for us: hand it back to the caller to decide.
            parked = rec.status == "waiting" and rec.waiting_reason == "approval"
            if rec.terminal or parked or time.monotonic() >= deadline:
                return turn_result(rec) if rec.kind == "turn" else run_status(rec)
            block_ms = max(1, int(min(1.0, deadline - time.monotonic()) * 1000))
            entries = read_entries(self.redis.xread({key: last_id}, block=block_ms, count=100) or [])
            if entries:
                last_id = entries[-1][0]
            # Another unit of the chat settling is no news for this one. A quiet second reads the record anyway:
            # an ending written without the signal (by an older worker) costs that second, never the ending.
            if not entries or any(text(fields.get(_SETTLED_FIELD, b"")) == unit for _, fields in entries):
                rec = load_record(self.redis, owner, unit)

    # -- either kind -----------------------------------------------------------------------------

    def _owner(self, ident: str, kind: Kind | None = None) -> str:
        """`chat:ID` or `run:ID`: as `kind` says, else a run when one by that id exists, else a chat."""
        _check_id(ident, "id")
        if kind is not None:
            return keys.owner(kind, ident)
        run_owner = keys.owner("run", ident)
        return run_owner if self.redis.exists(keys.record(run_owner, ident)) else keys.owner("chat", ident)

    @_reaching
    def retry(self, ident: str, *, kind: Kind | None = None) -> TurnRef | RunRef:
        """Re-run a chat's last failed turn or a failed run; resumes from a stored round if one is live.

        `kind` ("chat" or "run") says which one `ident` names, where a chat and a run may share an id.
        """
        owner = self._owner(ident, kind)
        if owner.startswith("run:"):
            rec = load_record(self.redis, owner, ident)
            if rec is None or rec.status != "failed":
                raise ValidationError(f"run {ident} has not failed (status {rec.status if rec else 'unknown'})")
            task_id = str(uuid.uuid4())
            self._requeue_failed(rec, task_id)
            self._send(rec, task_id)
            return RunRef(run_id=ident, task_id=task_id)
        last = self._last_turn(owner)
        if last is None or last.status != "failed":
            raise ValidationError(f"chat {ident} has no failed last turn to retry")
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
        if rec is None:
            return {"id": ident, "stopped": False, "message": "nothing to stop"}
        if rec.terminal:
            return {"id": ident, "stopped": False, "message": f"already {rec.status}"}
        self.redis.set(keys.stop(owner), rec.unit_id, ex=24 * 3600)
        if rec.status == "waiting" and rec.waiting_reason == "approval" and self._wake_parked(rec):
            # A parked unit holds no worker to see the flag: it is started to stop (its journaled rounds replay).
            self._send(rec)
        return {"id": ident, "stopped": True, "message": f"stop requested for {rec.unit_id}"}

    def _wake_parked(self, rec: UnitRecord) -> bool:
        """Move a unit parked for approval back to `queued` (once: a decision racing this sees it is not waiting)."""
        record = keys.record(rec.owner_id, rec.unit_id)
        woke = self.redis.eval(
            _WAKE, 2, record, keys.PENDING, rec.owner_id, repr(time.time())
        )
        return bool(woke)

    @_reaching
    def transcript(self, ident: str, *, kind: Kind | None = None) -> list[Message]:
        """The chat's or run's messages in order (notices included)."""
        return load_transcript(self.redis, self._owner(ident, kind))

    @_reaching
    def events(self, ident: str, after: str | None = None, *, kind: Kind | None = None) -> list[Event]:
        """The chat's or run's events after `after` (exclusive), in order; live text is left out."""
        key = keys.events(self._owner(ident, kind))
        start = f"({after}" if after else "-"
        out: list[Event] = []
        for stream_id, fields in stream_entries(self.redis.xrange(key, start, "+")):
            event = decode_event(stream_id, fields[b"e"])
            if event is not None and event.type != TEXT_DELTA:  # live text is the SSE stream's, not an event
                out.append(event)
        return out

    @_reaching
    def follow(
        self, ident: str, after: str | None = None, block_ms: int = 1000, *, kind: Kind | None = None
    ) -> list[Event]:
        """Events after `after`, waiting up to `block_ms` for the first one."""
        key = keys.events(self._owner(ident, kind))
        found = self.redis.xread({key: after or "0-0"}, block=block_ms, count=500)
        out: list[Event] = []
        for stream_id, fields in read_entries(found or []):
            event = decode_event(stream_id, fields[b"e"])
            if event is not None and event.type != TEXT_DELTA:
                out.append(event)
        return out

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
        if reason is not None and (not isinstance(reason, str) or len(reason) > 2000):
            raise ValidationError("reason must be a string of at most 2000 characters")
        return self._decide(ident, tool_use_id, "denied", reason=reason or None, by=by, kind=kind)

    def _decide(
        self, ident: str, tool_use_id: str, decision: Decision, *, reason: str | None, by: str | None, kind: Kind | None
    ) -> dict[str, Any]:
        _check_id(tool_use_id, "tool_use_id")
        by = _check_by(by)
        owner = self._owner(ident, kind)
        rec = find_waiting(self.redis, owner, tool_use_id)
        done = decide(self.redis, rec, tool_use_id, decision, reason=reason, by=by) if rec is not None else None
        if done is None or done.outcome in ("unknown", "not_waiting"):
            raise NotFound(f"no call {tool_use_id} waits for approval in {ident}")
        assert rec is not None
        if done.resume:
            # The record already says queued and the unit is in keys.PENDING: if this send is lost, the sweep sends it.
            self._send(rec)
        out: dict[str, Any] = {"id": ident, "tool_use_id": tool_use_id, "decision": done.decision}
        if done.outcome == "already":
            out["already_decided"] = True
        return out

    def _send(self, rec: UnitRecord, task_id: str | None = None) -> None:
        self._publisher.send(self.redis, rec, task_id)

    # -- coding runs -----------------------------------------------------------------------------

    @_reaching
    def start_run(self, goal: str, workspace: str | os.PathLike[str], run_id: str | None = None) -> RunRef:
        self._check_text(goal)
        path = os.path.realpath(os.fspath(workspace))
        if not os.path.isdir(path):
            raise ValidationError(f"workspace {os.fspath(workspace)!r} does not exist or is not a directory")
        run_id = _check_id(run_id, "run_id") if run_id is not None else f"run-{uuid.uuid4().hex[:16]}"
        owner = keys.owner("run", run_id)
        task_id = str(uuid.uuid4())
        now = time.time()
        rec = UnitRecord(
            kind="run",
            owner_id=owner,
            unit_id=run_id,
            text=goal,
            workspace=path,
            task_id=task_id,
            created_at=now,
            updated_at=now,
        )
        if not self.redis.hsetnx(keys.record(owner, run_id), "kind", json.dumps("run")):
            raise ValidationError(f"run {run_id} already exists")
        self.redis.hset(keys.record(owner, run_id), mapping=hash_mapping(rec.to_hash()))
        self.redis.sadd(keys.RUNS, run_id)
        self.redis.zadd(keys.PENDING, {owner: now})
        self._send(rec)
        return RunRef(run_id=run_id, task_id=task_id)

    @_reaching
    def run_status(self, run_id: str) -> RunStatus:
        rec = load_record(self.redis, keys.owner("run", _check_id(run_id, "run_id")), run_id)
        if rec is None:
            raise NotFound(f"no run {run_id}")
        return run_status(rec)
