"""How an execution ends: completed, failed, stopped, parked or auto-resumed, in one fenced write (a drain and a
replication wait, which hand the unit back to the queue, are in requeue.py).

A mixin of `Execution`: each ending is one batch (transcript, record, events, cleanup) committed
under the lease, so a stale holder can never settle a unit another worker now owns.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agent.events import encode_event
from agent.history.repair import backfill_dangling_calls
from agent.history.rounds import build_round
from agent.loop.edge import LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.policy import Driver, after_failure, compute_backoff
from agent.loop.state import LoopState, tool_summary
from agent.messages import Message, dump_message, notice, stop_notice
from agent.provider.replay import RequestFailed
from tasks.execution import wiring
from tasks.store import keys, settled
from tasks.store.approvals import due_member
from tasks.store.failover import FAILOVER_NOTICE
from tasks.store.fenced import Batch, FailedOver
from tasks.store.reads import chat_head_record
from tasks.store.records import Failure, UnitRecord, UsageOut
from tasks.store.replies import text_or_none

log = logging.getLogger("baton.execution")

if TYPE_CHECKING:
    import redis

    from config.settings import Settings
    from tasks.execution.live import RedisLiveText
    from tasks.store.fenced import Fence
    from tasks.store.journal import RedisJournal


@dataclass(frozen=True)
class HandOff:
    """The next turn of a chat, which the settle of the turn before it starts: its task's args and id."""

    args: tuple[str, ...]
    task_id: str
    queue: str | None = None  # its agent's queue (None: the worker's default)
    user: str | None = None  # whose turn it is ("": nobody's; None: not known), for its message's header


def next_turn(client: redis.Redis, owner_id: str) -> HandOff | None:
    """The chat's head as a hand-off, when it waits for one (`UnitRecord.awaits_hand_off`)."""
    nxt = chat_head_record(client, owner_id)
    if nxt is None or not nxt.awaits_hand_off:
        return None
    return HandOff((owner_id.partition(":")[2], nxt.unit_id), nxt.task_id, nxt.queue, nxt.user or "")


@dataclass(frozen=True)
class Outcome:
    """What the Celery task should do with its message (and, after a chat turn's settle, whom to start)."""

    action: Literal["done", "defer", "drop", "requeue", "auto_resume"]
    reason: str = ""
    countdown: float = 0.0
    hand_off: HandOff | None = None


@dataclass(frozen=True)
class Unit:
    driver: Driver
    owner_id: str
    unit_id: str

    @property
    def record_key(self) -> str:
        return keys.record(self.owner_id, self.unit_id)

    @property
    def event_prefix(self) -> str:
        return "turn" if self.driver is Driver.CHAT_TURN else "run"


@dataclass(frozen=True)
class Ending:
    """How a unit ends, as its settle writes it (once, or again with the failover's notice)."""

    rec: UnitRecord
    state: LoopState
    status: str
    failure: Failure | None
    extra: list[Message] | None
    round_raw: bytes | None
    stop_reason: str | None
    usage: UsageOut
    cut: dict[str, object]  # the attempt that was streaming, now void (`_cut`)


class Settling:
    """The endings of an execution; `Execution` provides the attributes below."""

    unit: Unit
    client: redis.Redis
    settings: Settings
    fence: Fence
    live: RedisLiveText | None
    replication_id: str | None
    journal: RedisJournal | None

    def _event(self, batch: Batch, kind: str, data: dict[str, object]) -> None:
        batch.xadd(keys.events(self.unit.owner_id), encode_event(kind, self.unit.owner_id, {**self._ids(), **data}))

    def _ids(self) -> dict[str, object]:
        return {"turn_id": self.unit.unit_id} if self.unit.driver is Driver.CHAT_TURN else {}

    def _cut(self, next_message_id: str | None = None) -> dict[str, object]:
        """The attempt that was streaming when the unit stopped (now void), for the event that says so.

        Without one, `next_message_id` names the step the unit was at, with no attempt to discard.
        """
        cut = self.live.cut() if self.live is not None else None
        if cut is not None:
            return {"message_id": cut[0], "attempt": cut[1]}
        return {"message_id": next_message_id} if next_message_id else {}

    def _finish(self, batch: Batch, rec: UnitRecord) -> None:
        """What every terminal settle shares: drop the journal, the stop flag, the queue entry, the lease.

        The unit's live text goes a while later (`BATON_LIVE_TEXT_RETENTION`), so a client reading behind
        or reconnecting just after the end still gets it; the transcript is the record from then on.
        """
        owner = self.unit.owner_id
        batch.add("DEL", keys.journal(owner, self.unit.unit_id, rec.generation))
        batch.add("DEL", keys.live(owner, self.unit.unit_id, rec.generation))
        since_ms = int(max(0.0, rec.created_at - 60) * 1000)  # a minute's slack for the clocks of client and Redis
        due = time.time() + self.settings.live_text_retention
        batch.add("ZADD", keys.delta_trim(owner), str(due), json.dumps([owner, self.unit.unit_id, since_ms]))
        batch.delete_if(keys.stop(owner), self.unit.unit_id, keys.STOP_ALL)  # a stop for this unit is spent
        if self.unit.driver is Driver.CHAT_TURN:
            batch.add("LREM", keys.queue(owner), "1", self.unit.unit_id)
        batch.add("DEL", keys.lease(owner))

    def _settle(
        self,
        rec: UnitRecord,
        state: LoopState,
        status: str,
        failure: Failure | None,
        extra: list[Message] | None = None,
        round_raw: bytes | None = None,
        stop_reason: str | None = None,
    ) -> Outcome:
        """End the unit in one fenced write: its transcript, its kept round, its record and ending event, and what
        every terminal settle cleans up; a chat turn's write also reads whom to hand off to."""
        ending = Ending(
            rec, state, status, failure, extra, round_raw, stop_reason, UsageOut(**state.usage.model_dump()),
            self._cut() if status != "completed" else {},  # text the unit was streaming is void
        )
        try:
            # Behind Sentinel or on a cluster the write itself checks that its master still has the replication
            # history the take read (None on one Redis: nothing to check), so the usual settle costs no INFO.
            replies = self.fence.commit(self._settle_batch(ending, False), unless_failed_over=self.replication_id)
        except FailedOver:  # nothing was written: the same, saying what the failover may have cost
            replies = self.fence.commit(self._settle_batch(ending, True))
        # Once it is written (a waiting caller is woken by the write, not kept waiting for the line).
        used = state.usage
        log.info(
            "%s %s %s%s: %d attempts; input %d, cache writes %d, cache reads %d, output %d tokens",
            self.unit.event_prefix,
            self.unit.unit_id,
            status,
            f" ({failure.failure_class}: {failure.message})" if failure else "",
            used.attempts, used.input_tokens, used.cache_creation_input_tokens, used.cache_read_input_tokens,
            used.output_tokens,
            extra={"failure_class": failure.failure_class} if failure else {},
        )
        chat = self.unit.driver is Driver.CHAT_TURN
        return Outcome("done", status, hand_off=self._next_turn(replies[0]) if chat else None)

    def _settle_batch(self, ending: Ending, failover: bool) -> Batch:
        """The settle's one write; with `failover`, its outcome also says the store failed over under the unit."""
        unit, rec, state, status, extra = self.unit, ending.rec, ending.state, ending.status, ending.extra
        batch = Batch()
        if failover:
            # Not silent: what the failover may have cost is in the outcome (a notice, and a mark on the event).
            extra = [*(extra or []), notice("failover", FAILOVER_NOTICE, unit.unit_id)]
        self._append_transcript(batch, rec, state, status, extra)
        if ending.round_raw is not None:
            batch.add(
                "SET",
                keys.round_slot(unit.owner_id),
                ending.round_raw.decode(),
                "PX",
                str(int(self.settings.round_ttl * 1000)),
            )
        self._settled_record(batch, rec, state, status, ending.failure, ending.usage)
        data = self._ending_data(
            rec, ending.failure, ending.usage, failover, ending.round_raw is not None, ending.stop_reason, ending.cut
        )
        self._event(batch, f"{unit.event_prefix}.{status}", data)
        self._finish(batch, rec)
        batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)  # not running: nothing for the lost-worker sweep
        batch.add("XADD", keys.settled(unit.owner_id), *settled.xadd_args(unit.unit_id))  # wakes a waiting caller
        if unit.driver is Driver.CHAT_TURN:
            batch.read("LINDEX", keys.queue(unit.owner_id), "0")  # who is next, read in the same round trip
        return batch

    def _append_transcript(
        self, batch: Batch, rec: UnitRecord, state: LoopState, status: str, extra: list[Message] | None
    ) -> None:
        """The unit's messages not yet in the transcript, and the notices it ends with."""
        messages = [*state.messages[rec.committed :], *(extra or [])]
        if status == "failed":
            messages = list(extra or [])  # a failed turn keeps no half-finished rounds in its transcript
        if messages:
            batch.add("RPUSH", keys.transcript(self.unit.owner_id), *[dump_message(m) for m in messages])

    def _settled_record(
        self, batch: Batch, rec: UnitRecord, state: LoopState, status: str, failure: Failure | None, usage: UsageOut
    ) -> None:
        """The unit's record as it ends: its status, reply or failure, and usage; nothing left waiting."""
        batch.hset(
            self.unit.record_key,
            {
                "status": status,
                "reply": state.reply if status == "completed" else None,
                "failure": failure.public() if failure else None,
                "usage": usage.model_dump(),
                "resumed": rec.resumed,
                "waiting_reason": None,
                "approvals": [],
                "updated_at": time.time(),
            },
        )

    def _ending_data(
        self,
        rec: UnitRecord,
        failure: Failure | None,
        usage: UsageOut,
        failover: bool,
        kept_round: bool,
        stop_reason: str | None,
        cut: dict[str, object],
    ) -> dict[str, object]:
        """What the unit's ending event (`turn.completed`, `run.failed`, ...) says beyond its ids."""
        data: dict[str, object] = {"usage": usage.model_dump(), "resumed": rec.resumed}
        if failover:
            data["store_failover"] = True
        unreplicated = self.journal.unreplicated() if self.journal is not None else []
        if unreplicated:
            # Write tools that ran with no replica to confirm their write-ahead entry (tasks/store/replicas.py).
            data["unreplicated"] = unreplicated
        if stop_reason is not None:
            data["reason"] = stop_reason  # the page says "interrupted by a new message", not "stopped"
        data.update(cut)
        if failure is not None:
            data.update(
                {
                    "class": failure.failure_class,
                    "retryable": failure.retryable,
                    "message": failure.message,
                    "resumable_round": kept_round,
                }
            )
        return data

    def _next_turn(self, head: bytes | None) -> HandOff | None:
        """The chat's next turn, read after this turn left the queue: the settle starts it (no turn polls).

        `head` is the queue's head as the fenced write left it (read inside it), so a turn enqueued before it is
        seen here, and one enqueued after it finds itself at the head when its own message runs. A crash or a store
        error before the hand-off is published is recovered by this turn's message coming back, retried or
        redelivered: it finds the turn finished and starts the next (`Execution.run`); on a Redis broker also by
        the lost-message sweep (the chat stays in `keys.PENDING` while it has unfinished turns). A needless copy
        (the next turn's own message is still in the broker) is harmless: the lease, or the finished record, turns
        the second copy away.
        """
        if head is None:
            return None  # the common case, a chat with nothing queued behind this turn: no read of its own
        return next_turn(self.client, self.unit.owner_id)

    def _stored_round(self, state: LoopState) -> bytes | None:
        """What a failed unit finished, serialized for the expiring slot (None: nothing worth keeping)."""
        return build_round(
            state,
            owner_id=self.unit.owner_id,
            turn_id=self.unit.unit_id,
            now=time.time(),
            ttl=self.settings.round_ttl,
            max_bytes=self.settings.round_max_bytes,
        )

    def _settle_stopped(self, rec: UnitRecord, state: LoopState) -> Outcome:
        """A user's stop, or an interrupt by a new message: every unfinished call gets the placeholder, and the
        notice says which. The reason is read now: an interrupt marks a running turn's record after it started."""
        state.messages = backfill_dangling_calls(state.messages)
        why: str | None = rec.stop_reason
        if why is None:
            stored = text_or_none(self.client.hget(self.unit.record_key, "stop_reason"))
            why = json.loads(stored) if stored else None
        text = stop_notice(why)
        return self._settle(
            rec, state, "stopped", None, extra=[notice("stopped", text, self.unit.unit_id)], stop_reason=why
        )

    def _failed(self, rec: UnitRecord, state: LoopState, err: RequestFailed | LoopFailure) -> Outcome:
        unit, settings = self.unit, self.settings
        failure_class = FailureClass(err.failure_class)
        round_raw = None
        if isinstance(err, RequestFailed):
            round_raw = self._stored_round(state)
        decision = after_failure(
            unit.driver, failure_class, auto_resumes_used=rec.auto_resumes, has_checkpoint=round_raw is not None
        )
        if decision.action == "auto_resume" and round_raw is not None:
            batch = Batch()
            batch.add("SET", keys.round_slot(unit.owner_id), round_raw.decode(), "PX", str(settings.round_ttl * 1000))
            batch.hset(
                unit.record_key,
                {
                    "status": "queued",
                    "generation": rec.generation + 1,
                    "auto_resumes": rec.auto_resumes + 1,
                    "resume_pending": True,
                    "history_len": -1,
                    "usage": state.usage.model_dump(),
                    "updated_at": time.time(),
                },
            )
            batch.add("DEL", keys.journal(unit.owner_id, unit.unit_id, rec.generation))
            batch.add("DEL", keys.live(unit.owner_id, unit.unit_id, rec.generation))
            reason = f"{failure_class}: resuming from the stored round"
            self._event(
                batch,
                f"{unit.event_prefix}.retry" if unit.driver is Driver.CHAT_TURN else "run.step",
                {
                    **self._cut(f"{unit.unit_id}:m{state.rounds_used}"),
                    "discarded": True,
                    "class": str(failure_class),
                    "reason": reason,
                    "auto_resume": True,
                },
            )
            batch.add("DEL", keys.lease(unit.owner_id))
            batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)
            self.fence.commit(batch)
            delay = compute_backoff(1, wiring.backoff(settings))
            return Outcome("auto_resume", reason, delay)
        failure = Failure.model_validate(
            {"class": str(failure_class), "retryable": decision.retryable, "message": str(err)}
        )
        notes = []
        summary = tool_summary(state)
        if summary:
            notes.append(notice("tool_summary", summary, unit.unit_id))
        notes.append(notice("error", f"Failed ({failure_class}): {err}", unit.unit_id))
        return self._settle(rec, state, "failed", failure, extra=notes, round_raw=round_raw)

    def _park(self, rec: UnitRecord, state: LoopState, pending: list[str]) -> Outcome:
        """Calls wait for a person: the unit settles in `waiting` and its task ends, holding no worker and no
        lease. Its journal stays: a decision puts it back in the queue, and any worker replays it from there."""
        unit = self.unit
        asked = {b.id: b for m in state.messages if m.role == "assistant" for b in m.tool_uses}
        calls: list[dict[str, object]] = [
            {"tool_use_id": i, "name": asked[i].name, "input": asked[i].input} for i in pending if i in asked
        ]
        due = time.time() + self.settings.approval_ttl
        log.info("%s %s waiting for approval of %s", unit.event_prefix, unit.unit_id, ", ".join(pending))
        batch = Batch()
        batch.hset(
            unit.record_key,
            {"status": "waiting", "waiting_reason": "approval", "approvals": calls, "updated_at": time.time()},
        )
        for tool_use_id in pending:
            # NX: a unit that parks again (a replay before every call was decided) keeps each call's first deadline.
            member = due_member(unit.owner_id, unit.unit_id, tool_use_id)
            batch.add("ZADD", keys.approval_due(unit.owner_id), "NX", repr(due), member)
        batch.add("DEL", keys.lease(unit.owner_id))
        batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)
        batch.add("XADD", keys.settled(unit.owner_id), *settled.xadd_args(unit.unit_id))  # wakes a waiting caller
        self.fence.commit(batch)
        return Outcome("done", "waiting")
