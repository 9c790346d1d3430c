"""What `Client` and `AsyncClient` share, free of I/O: checks, records and events to write, replies read back.

The two clients differ only in how they talk to Redis and the broker (redis-py or redis.asyncio, a call or a
thread); every decision in between is a plain function here, so the sync and the async client cannot drift
apart (the "sans-I/O" way of h11/httpx, and of redis-py's own sync/async pairs).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from agent.events import LIVE_DELTAS, Event, decode_event, encode_event
from agent.history.rounds import same_text
from agent.messages.media import FileBlock, sniff
from tasks.store import keys
from tasks.store.approvals import Decided
from tasks.store.enqueue import OnBusy
from tasks.store.records import RunRef, RunStatus, TurnRef, TurnResult, UnitRecord, run_status, turn_result
from tasks.store.replies import Entry, text

Kind = Literal["chat", "run"]
ON_BUSY: tuple[OnBusy, ...] = ("enqueue", "interrupt", "reject")

BY_MAX = 200
REASON_MAX = 2000
SETTLED_FIELD = b"u"


# KEYS: record, PENDING. ARGV: owner id, now. Only a unit still parked for approval is woken.
WAKE = """
if redis.call('HGET', KEYS[1], 'status') ~= '"waiting"' or redis.call('HGET', KEYS[1], 'waiting_reason') ~= '"approval"'
then return 0 end
redis.call('HSET', KEYS[1], 'status', '"queued"', 'waiting_reason', 'null', 'updated_at', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""



class ValidationError(ValueError):
    """Bad input, refused before anything is enqueued."""


class NotFound(LookupError):
    """No chat turn or run by that id."""


class Busy(RuntimeError):
    """`on_busy="reject"`: the chat has a turn queued or running (`turn_id`, its oldest unfinished one), so
    nothing was enqueued."""

    def __init__(self, chat_id: str, turn_id: str) -> None:
        self.chat_id = chat_id
        self.turn_id = turn_id
        super().__init__(f"chat {chat_id} is busy with turn {turn_id}; nothing was enqueued")


# The words of an unknown id, in one place: the clients raise them, and the HTTP API answers a chat or run its
# `authorize` refuses with exactly the same 404 (web/access.py), so a refused id reads as an unknown one.


def no_turn(chat_id: str, turn_id: str) -> NotFound:
    return NotFound(f"no turn {turn_id} in chat {chat_id}")


def no_file(chat_id: str, sha256: str) -> NotFound:
    return NotFound(f"no file {sha256} in chat {chat_id}")


def served_file(chat_id: str, sha256: str, data: bytes | None) -> tuple[bytes, str]:
    """A stored file's bytes and their type (read from them, as at the send), or the NotFound of a file the chat
    does not have."""
    kind = sniff(data) if data is not None else None
    if data is None or kind is None:
        raise no_file(chat_id, sha256)
    return data, kind


def no_run(run_id: str) -> NotFound:
    return NotFound(f"no run {run_id}")


def no_waiting_call(ident: str, tool_use_id: str) -> NotFound:
    return NotFound(f"no call {tool_use_id} waits for approval in {ident}")


# -- checks ------------------------------------------------------------------------------------------


def check_id(value: object, what: str) -> str:
    """`value` if it is a valid chat, run, turn or call id, else `ValidationError` naming `what`."""
    if not isinstance(value, str) or not keys.ID_PATTERN.match(value):
        raise ValidationError(
            f"{what} must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit;"
            f" got {value!r}"
        )
    return value


def check_text(value: object, max_chars: int) -> str:
    """A message's text or a run's goal: a non-blank string of valid UTF-8, at most `max_chars` characters."""
    if not isinstance(value, str):
        raise ValidationError("text must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValidationError("text is not valid UTF-8") from err
    if not value.strip():
        raise ValidationError("text is empty")
    if len(value) > max_chars:
        raise ValidationError(f"text is {len(value)} characters; the limit is {max_chars}")
    return value


def check_by(value: object) -> str | None:
    """Who decided, as the caller names them: a name on one line, at most `BY_MAX` characters, outer blanks
    dropped; None (or blank) when nobody is named (the event then says "someone"). It is what the caller says,
    not an identity Baton checked: anyone who may decide may give any name."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value.strip()) > BY_MAX or any(c < " " or c == "\x7f" for c in value):
        raise ValidationError(f"by must be a name on one line of at most {BY_MAX} characters")
    return value.strip() or None


def check_reason(value: object) -> str | None:
    """A denial's reason: None, or a string of at most `REASON_MAX` characters (blank counts as none)."""
    if value is not None and (not isinstance(value, str) or len(value) > REASON_MAX):
        raise ValidationError(f"reason must be a string of at most {REASON_MAX} characters")
    return value or None


def check_on_busy(value: object) -> OnBusy:
    """One of `ON_BUSY`, else `ValidationError`."""
    for mode in ON_BUSY:
        if value == mode:
            return mode
    raise ValidationError(f"on_busy must be one of {', '.join(ON_BUSY)}; got {value!r}")


def check_workspace(workspace: str | os.PathLike[str]) -> str:
    """The run's workspace, resolved: an existing directory (on this machine, which is the workers')."""
    path = os.path.realpath(os.fspath(workspace))
    if not os.path.isdir(path):
        raise ValidationError(f"workspace {os.fspath(workspace)!r} does not exist or is not a directory")
    return path


STREAM_ID = re.compile(r"^(\d{1,20})-(\d{1,20})$")


def check_stream_id(raw: str) -> str:
    """A Redis stream id `MS-SEQ` (each part a 64-bit unsigned integer); `ValidationError` otherwise."""
    found = STREAM_ID.fullmatch(raw)
    if not found or any(int(part) >= 2**64 for part in found.groups()):
        raise ValidationError(f"not a stream id (MS-SEQ, e.g. 1700000000000-0): {raw[:40]!r}")
    return raw


# -- what is written ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentPick:
    """What a unit is enqueued with: the agent it names (None: the chat's, else the fleet's default), the model
    it asks for (None: its agent's), and the queue its messages go to (None: the client's `BATON_QUEUE`)."""

    agent: str | None = None
    model: str | None = None
    queue: str | None = None


@dataclass(frozen=True)
class NewTurn:
    """A turn about to be enqueued: its record, the hash fields and `turn.queued` event the script writes."""

    rec: UnitRecord
    fields: dict[str, str]
    event: str

    @property
    def ref(self) -> TurnRef:
        return TurnRef(chat_id=self.rec.owner_id.partition(":")[2], turn_id=self.rec.unit_id, task_id=self.rec.task_id)


def same_message(last: UnitRecord, text_: str, files: tuple[FileBlock, ...]) -> bool:
    """Whether a send repeats a failed turn's message (its text, and the same files in the same order): it then
    retries that turn instead of enqueuing a new one."""
    return same_text(last.text, text_) and [f.sha256 for f in last.files] == [f.sha256 for f in files]


def new_turn(
    chat_id: str, text_: str, now: float, pick: AgentPick | None = None, *, user: str | None = None,
    files: tuple[FileBlock, ...] = (),
) -> NewTurn:
    """A new turn of `chat_id` (ids drawn here), as `pick` chose its agent and model; `files`: its message's."""
    owner = keys.owner("chat", chat_id)
    turn_id = f"t-{uuid.uuid4().hex[:16]}"
    pick = pick or AgentPick()
    rec = UnitRecord(
        kind="turn", owner_id=owner, unit_id=turn_id, text=text_, task_id=str(uuid.uuid4()), created_at=now,
        updated_at=now, agent=pick.agent, model=pick.model, queue=pick.queue, user=user, files=list(files),
    )
    return NewTurn(rec, rec.to_hash(), encode_event("turn.queued", owner, {"turn_id": turn_id}, at=now))


def new_run_id() -> str:
    """A fresh run id (what `start_run` draws when given none; the HTTP API draws it first, to authorize it)."""
    return f"run-{uuid.uuid4().hex[:16]}"


def new_run(
    goal: str, workspace: str, run_id: str | None, now: float, pick: AgentPick | None = None, *, user: str | None = None
) -> UnitRecord:
    """A new run's record (`run_id` drawn when None); `workspace` is the resolved directory."""
    run_id = run_id or new_run_id()
    pick = pick or AgentPick()
    return UnitRecord(
        kind="run",
        owner_id=keys.owner("run", run_id),
        unit_id=run_id,
        text=goal,
        workspace=workspace,
        task_id=str(uuid.uuid4()),
        created_at=now,
        updated_at=now,
        agent=pick.agent,
        model=pick.model,
        queue=pick.queue,
        user=user,
    )


def requeue_fields(rec: UnitRecord, task_id: str, now: float) -> dict[str, str]:
    """The record fields that put a failed unit back in the queue under `task_id`.

    A unit that failed before it ever started (its publish failed) is started afresh: its first generation
    still has to write the user's message. Any other starts a new generation that may resume a stored round.
    """
    never_started = rec.generation == 0 and rec.history_len < 0
    return {
        "status": json.dumps("queued"),
        "generation": json.dumps(rec.generation if never_started else rec.generation + 1),
        "resume_pending": json.dumps(not never_started),
        "history_len": "-1",
        "failure": "null",
        "task_id": json.dumps(task_id),
        "committed": "0",
        "updated_at": json.dumps(now),
    }


def retry_queued_event(rec: UnitRecord) -> str:
    """The `turn.queued` event of a retried turn."""
    return encode_event("turn.queued", rec.owner_id, {"turn_id": rec.unit_id, "retry": True})


def turn_ref(rec: UnitRecord, task_id: str) -> TurnRef:
    return TurnRef(chat_id=rec.owner_id.partition(":")[2], turn_id=rec.unit_id, task_id=task_id)


def new_task_id() -> str:
    return str(uuid.uuid4())


# -- what is read back -------------------------------------------------------------------------------


def wait_target(ref: TurnRef | RunRef) -> tuple[str, str]:
    """(owner, unit) that `wait(ref)` watches."""
    if isinstance(ref, RunRef):
        return keys.owner("run", ref.run_id), ref.run_id
    return keys.owner("chat", ref.chat_id), ref.turn_id


def result_of(rec: UnitRecord) -> TurnResult | RunStatus:
    """A turn's `TurnResult` or a run's `RunStatus`."""
    return turn_result(rec) if rec.kind == "turn" else run_status(rec)


def wait_over(rec: UnitRecord | None, unit: str, *, timed_out: bool) -> TurnResult | RunStatus | None:
    """What `wait` returns now, or None to keep waiting. A unit parked for approval waits for a person, not
    for the caller: it is handed back to decide. An unknown unit is `NotFound`."""
    if rec is None:
        raise NotFound(f"no such turn or run: {unit}")
    parked = rec.status == "waiting" and rec.waiting_reason == "approval"
    return result_of(rec) if rec.terminal or parked or timed_out else None


def settled_news(entries: list[Entry], unit: str) -> bool:
    """Whether the settled signal's new entries call for reading `unit`'s record again: an entry naming it, or
    none at all (a quiet second reads the record anyway: an ending written without the signal, by an older
    worker, costs that second, never the ending). Another unit of the chat settling is no news for this one."""
    return not entries or any(text(fields.get(SETTLED_FIELD, b"")) == unit for _, fields in entries)


def events_of(entries: Iterable[Entry]) -> list[Event]:
    """The events among stream entries; live text is left out (it is the SSE stream's, not an event)."""
    out: list[Event] = []
    for stream_id, fields in entries:
        event = decode_event(stream_id, fields.get(b"e", b""))
        if event is not None and event.type not in LIVE_DELTAS:
            out.append(event)
    return out


def stream_event(stream_id: str, raw: bytes | str) -> Event | None:
    """One entry of the live stream (events, `text.delta` and `reasoning.delta`) as an `Event`; None for an unreadable
    one."""
    return decode_event(stream_id, raw)


def stop_answer(ident: str, rec: UnitRecord | None) -> dict[str, Any] | None:
    """What `stop` answers without asking anything (nothing to stop, already ended); None: ask it to stop."""
    if rec is None:
        return {"id": ident, "stopped": False, "message": "nothing to stop"}
    if rec.terminal:
        return {"id": ident, "stopped": False, "message": f"already {rec.status}"}
    return None


def stop_requested(ident: str, rec: UnitRecord) -> dict[str, Any]:
    return {"id": ident, "stopped": True, "message": f"stop requested for {rec.unit_id}"}


def parked_for_approval(rec: UnitRecord) -> bool:
    return rec.status == "waiting" and rec.waiting_reason == "approval"


def decision_answer(ident: str, tool_use_id: str, done: Decided | None) -> dict[str, Any]:
    """`{"id", "tool_use_id", "decision"}` (and `already_decided`), or `NotFound` when no such call waits."""
    if done is None or done.outcome in ("unknown", "not_waiting"):
        raise no_waiting_call(ident, tool_use_id)
    out: dict[str, Any] = {"id": ident, "tool_use_id": tool_use_id, "decision": done.decision}
    if done.outcome == "already":
        out["already_decided"] = True
    return out


def retry_refused(what: Kind, ident: str, rec: UnitRecord | None) -> ValidationError | None:
    """Why `retry` cannot re-run `rec` (None: it can)."""
    if rec is not None and rec.status == "failed":
        return None
    if what == "run":
        return ValidationError(f"run {ident} has not failed (status {rec.status if rec else 'unknown'})")
    return ValidationError(f"chat {ident} has no failed last turn to retry")


def owner_of(ident: str, kind: Kind | None, run_exists: bool | None) -> str:
    """`chat:ID` or `run:ID`: as `kind` says, else a run when one by that id exists, else a chat."""
    if kind is not None:
        return keys.owner(kind, ident)
    return keys.owner("run", ident) if run_exists else keys.owner("chat", ident)


class SettledTails:
    """The settled signal's last id when this client enqueued each turn, until it waits for it (a few thousand at
    most: a turn nobody waits for is forgotten, oldest first)."""

    KEPT = 4096

    def __init__(self) -> None:
        self._tails: dict[tuple[str, str], str] = {}

    def note(self, owner: str, unit: str, tail: str) -> None:
        if len(self._tails) >= self.KEPT:
            self._tails.pop(next(iter(self._tails)), None)
        self._tails[(owner, unit)] = tail

    def take(self, owner: str, unit: str) -> str | None:
        return self._tails.pop((owner, unit), None)
