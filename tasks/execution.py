"""One execution of a chat turn or a coding run: load, decide, act.

The flow both drivers share: take the lease, replay the journal, run the loop, and settle the
unit (completed, failed, stopped, interrupted or auto-resumed) in one fenced write. Celery is not
imported here; the task modules turn the returned `Outcome` into Celery actions.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

import redis

from agent.cancel import CancelToken
from agent.errors import Cancelled, LeaseLost
from agent.events import encode_event
from agent.failures import FailureClass, classify
from agent.history import backfill_dangling_calls
from agent.loop import LoopConfig, LoopFailure, run_loop
from agent.messages import (
    DEPLOY_NOTICE,
    RESUMED_NOTICE,
    STOPPED_NOTICE,
    Message,
    dump_message,
    load_message,
    notice,
    user_text,
)
from agent.policy import Driver, after_failure, after_interruption, compute_backoff
from agent.provider.replay import RequestFailed
from agent.rounds import build_round, load_round, seed_state, usable_round
from agent.state import LoopState, Usage, tool_summary
from config.settings import Settings
from tasks import keys, logs, wiring
from tasks.fenced import Batch, Fence
from tasks.journal import RedisJournal
from tasks.lease import Lease, holder_unit, new_token
from tasks.records import Failure, UnitRecord, UsageOut
from tasks.watcher import Watcher

log = logging.getLogger("baton.execution")


@dataclass(frozen=True)
class Outcome:
    """What the Celery task should do with its message."""

    action: Literal["done", "defer", "drop", "requeue", "auto_resume"]
    reason: str = ""
    countdown: float = 0.0


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


def load_record(client: redis.Redis, owner_id: str, unit_id: str) -> UnitRecord | None:
    return UnitRecord.from_hash(client.hgetall(keys.record(owner_id, unit_id)))


def load_transcript(client: redis.Redis, owner_id: str, end: int = -1) -> list[Message]:
    raw = client.lrange(keys.transcript(owner_id), 0, end)
    return [m for m in (load_message(r) for r in raw) if m is not None]


def chat_head(client: redis.Redis, owner_id: str) -> str | None:
    """The chat's oldest unfinished turn; finished or unknown heads are cleared on the way."""
    while True:
        head = client.lindex(keys.queue(owner_id), 0)
        if head is None:
            return None
        turn_id = head.decode()
        rec = load_record(client, owner_id, turn_id)
        if rec is not None and not rec.terminal:
            return turn_id
        client.lrem(keys.queue(owner_id), 1, turn_id)


class Execution:
    def __init__(self, settings: Settings, unit: Unit, *, hostname: str, task_id: str) -> None:
        self.settings = settings
        self.unit = unit
        self.hostname = hostname
        self.task_id = task_id
        self.client = wiring.redis_client(settings.redis_url)
        self.cancel = CancelToken()

    def run(self) -> Outcome:
        unit, client = self.unit, self.client
        kind, _, ident = unit.owner_id.partition(":")
        ids: dict[str, object] = {f"{kind}_id": ident, "task_id": self.task_id}
        if unit.driver is Driver.CHAT_TURN:
            ids["turn_id"] = unit.unit_id
        logs.context.set(ids)
        rec = load_record(client, unit.owner_id, unit.unit_id)
        if rec is None:
            log.error("no record for %s %s; message dropped", unit.owner_id, unit.unit_id)
            return Outcome("drop", "unknown unit")
        if rec.terminal:
            return Outcome("done", "already finished")
        if unit.driver is Driver.CHAT_TURN and chat_head(client, unit.owner_id) != unit.unit_id:
            return Outcome("defer", "an earlier turn of this chat is unfinished", 0.2)
        lease = Lease(
            client, keys.lease(unit.owner_id), new_token(unit.unit_id, self.hostname), self.settings.lease_ttl
        )
        if not lease.acquire():
            if holder_unit(lease.holder()) == unit.unit_id:
                return Outcome("drop", "a live execution of this unit holds its lease")
            return Outcome("defer", "another unit of this owner holds the lease", 0.2)
        self.fence = Fence(client, lease.key, lease.token)
        watcher = Watcher(
            client, lease, owner_id=unit.owner_id, unit_id=unit.unit_id, hostname=self.hostname, cancel=self.cancel
        )
        try:
            watcher.start()
            return self._execute(rec, lease)
        except LeaseLost:
            log.warning("lease lost for %s; a newer execution owns it, stopping without writing", unit.owner_id)
            return Outcome("drop", "lease lost")
        except redis.RedisError:
            raise  # the store is unreachable: nothing can be settled; the lease sweep recovers the unit
        except Exception as err:
            log.exception("unexpected error in %s %s", unit.owner_id, unit.unit_id)
            failure = Failure.model_validate(
                {
                    "class": str(classify(err).failure_class),
                    "retryable": False,
                    "message": f"{type(err).__name__}: {err}",
                }
            )
            return self._settle(
                rec, LoopState(), "failed", failure, extra=[notice("error", f"Failed: {failure.message}")]
            )
        finally:
            watcher.stop()

    # -- the steps -------------------------------------------------------------------------------

    def _execute(self, rec: UnitRecord, lease: Lease) -> Outcome:
        unit, client, settings = self.unit, self.client, self.settings
        now = time.time()
        start = Batch()
        if rec.history_len < 0:
            length = client.llen(keys.transcript(unit.owner_id))
            if rec.generation == 0:
                start.add("RPUSH", keys.transcript(unit.owner_id), dump_message(user_text(rec.text, unit.unit_id)))
                length += 1
            rec.history_len = length
            self._event(start, f"{unit.event_prefix}.started", {"generation": rec.generation})
        elif rec.waiting_reason == "platform_interrupt":
            self._event(
                start,
                f"{unit.event_prefix}.resumed" if unit.driver is Driver.CODING_RUN else "turn.started",
                {"after_interruptions": rec.interruptions},
            )
        rec.status, rec.waiting_reason, rec.task_id = "running", None, self.task_id or rec.task_id
        start.hset(
            unit.record_key,
            {
                "status": "running",
                "waiting_reason": None,
                "history_len": rec.history_len,
                "task_id": rec.task_id,
                "updated_at": now,
            },
        )
        self.fence.commit(start)
        if client.get(keys.stop(unit.owner_id)) in (unit.unit_id.encode(), b"*"):
            return self._settle_stopped(rec, LoopState())

        journal = RedisJournal(
            client, self.fence, owner_id=unit.owner_id, unit_id=unit.unit_id, generation=rec.generation
        )
        # A new generation (a retry, an auto-resume) starts an empty journal; the run's step count goes on.
        journal.done_steps = max(journal.done_steps, rec.steps)
        state = self._seed(rec, journal)
        history = load_transcript(client, unit.owner_id, rec.history_len - 1)
        config = self._config(rec)
        tools = (
            wiring.chat_tools(settings)
            if unit.driver is Driver.CHAT_TURN
            else wiring.run_tools(settings, rec.workspace or ".")
        )
        try:
            run_loop(
                history,
                state,
                provider=wiring.build_provider(settings, client),
                tools=tools,
                edge=journal,
                cancel=self.cancel,
                config=config,
            )
        except Cancelled as stop:
            if stop.reason == "stop":
                return self._settle_stopped(rec, state)
            return self._interrupted(rec, state, "platform_deploy")
        except (RequestFailed, LoopFailure) as err:
            return self._failed(rec, state, err)
        return self._settle(rec, state, "completed", None)

    def _config(self, rec: UnitRecord) -> LoopConfig:
        settings, unit = self.settings, self.unit
        is_run = unit.driver is Driver.CODING_RUN
        return LoopConfig(
            owner_id=unit.owner_id,
            turn_id=unit.unit_id,
            driver=unit.driver,
            model=settings.model,
            max_rounds=settings.run_max_steps if is_run else settings.max_rounds,
            retry_budget=settings.retry_budget,
            backoff=wiring.backoff(settings),
            system=RUN_SYSTEM if is_run else None,
            deadline=time.monotonic() + settings.run_wall_clock if is_run else None,
            stop_grace=settings.stop_grace,
            drain_grace=settings.drain_grace,
        )

    def _seed(self, rec: UnitRecord, journal: RedisJournal) -> LoopState:
        """Where this generation starts: its journaled seed, a stored round to resume, or nothing."""
        seeded = journal.recorded("seed")
        if seeded is not None:
            return LoopState.model_validate(seeded["state"])
        if not rec.resume_pending:
            return LoopState()
        raw = self.client.getdel(keys.round_slot(self.unit.owner_id))
        stored = usable_round(load_round(raw), owner_id=self.unit.owner_id, turn_id=self.unit.unit_id, now=time.time())
        # The earlier generations' attempts were made and billed: the turn's usage keeps counting them.
        carried = Usage(**rec.usage.model_dump())
        batch = Batch().hset(self.unit.record_key, {"resume_pending": False})
        if stored is None:
            # No usable round: a plain re-run, whatever an earlier generation of this turn resumed from.
            batch.hset(self.unit.record_key, {"resumed": False})
            rec.resumed = False
            self.fence.commit(batch)
            return LoopState(usage=carried)
        state = seed_state(stored)
        state.usage = carried
        batch.hset(journal.key, {"seed": {"status": "seed", "state": state.model_dump(mode="json")}})
        batch.hset(self.unit.record_key, {"resumed": True})
        batch.add("RPUSH", keys.transcript(self.unit.owner_id), dump_message(notice("resumed", RESUMED_NOTICE)))
        self._event(
            batch,
            f"{self.unit.event_prefix}.resumed",
            {"from": "stored_round", "rounds": stored.rounds_used, "tools": list(stored.executed)},
        )
        self.fence.commit(batch)
        journal.steps["seed"] = {"status": "seed"}
        rec.resumed = True
        return state

    # -- settling --------------------------------------------------------------------------------

    def _event(self, batch: Batch, kind: str, data: dict[str, object]) -> None:
        batch.xadd(keys.events(self.unit.owner_id), encode_event(kind, self.unit.owner_id, {**self._ids(), **data}))

    def _ids(self) -> dict[str, object]:
        return {"turn_id": self.unit.unit_id} if self.unit.driver is Driver.CHAT_TURN else {}

    def _finish(self, batch: Batch, rec: UnitRecord) -> None:
        """What every terminal settle shares: drop the journal, the stop flag, the queue entry, the lease."""
        owner = self.unit.owner_id
        batch.add("DEL", keys.journal(owner, self.unit.unit_id, rec.generation))
        if self.client.get(keys.stop(owner)) in (self.unit.unit_id.encode(), b"*"):
            batch.add("DEL", keys.stop(owner))
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
    ) -> Outcome:
        unit = self.unit
        batch = Batch()
        messages = [*state.messages[rec.committed :], *(extra or [])]
        if status == "failed":
            messages = list(extra or [])  # a failed turn keeps no half-finished rounds in its transcript
        if messages:
            batch.add("RPUSH", keys.transcript(unit.owner_id), *[dump_message(m) for m in messages])
        if round_raw is not None:
            batch.add(
                "SET",
                keys.round_slot(unit.owner_id),
                round_raw.decode(),
                "PX",
                str(int(self.settings.round_ttl * 1000)),
            )
        usage = UsageOut(**state.usage.model_dump())
        batch.hset(
            unit.record_key,
            {
                "status": status,
                "reply": state.reply if status == "completed" else None,
                "failure": failure.public() if failure else None,
                "usage": usage.model_dump(),
                "resumed": rec.resumed,
                "waiting_reason": None,
                "updated_at": time.time(),
            },
        )
        data: dict[str, object] = {"usage": usage.model_dump(), "resumed": rec.resumed}
        if failure is not None:
            data.update(
                {
                    "class": failure.failure_class,
                    "retryable": failure.retryable,
                    "message": failure.message,
                    "resumable_round": round_raw is not None,
                }
            )
        self._event(batch, f"{unit.event_prefix}.{status}", data)
        self._finish(batch, rec)
        self.fence.commit(batch)
        self.client.zrem(keys.ACTIVE, unit.owner_id)
        return Outcome("done", status)

    def _settle_stopped(self, rec: UnitRecord, state: LoopState) -> Outcome:
        state.messages = backfill_dangling_calls(state.messages)
        return self._settle(rec, state, "stopped", None, extra=[notice("stopped", STOPPED_NOTICE, self.unit.unit_id)])

    def _failed(self, rec: UnitRecord, state: LoopState, err: RequestFailed | LoopFailure) -> Outcome:
        unit, settings = self.unit, self.settings
        failure_class = FailureClass(err.failure_class)
        round_raw = None
        if isinstance(err, RequestFailed):
            round_raw = build_round(
                state,
                owner_id=unit.owner_id,
                turn_id=unit.unit_id,
                now=time.time(),
                ttl=settings.round_ttl,
                max_bytes=settings.round_max_bytes,
            )
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
            reason = f"{failure_class}: resuming from the stored round"
            self._event(
                batch,
                f"{unit.event_prefix}.retry" if unit.driver is Driver.CHAT_TURN else "run.step",
                {
                    "message_id": f"{unit.unit_id}:m{state.rounds_used}",
                    "discarded": True,
                    "class": str(failure_class),
                    "reason": reason,
                    "auto_resume": True,
                },
            )
            batch.add("DEL", keys.lease(unit.owner_id))
            self.fence.commit(batch)
            self.client.zrem(keys.ACTIVE, unit.owner_id)
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

    def _interrupted(self, rec: UnitRecord, state: LoopState, cause: str) -> Outcome:
        """A drain: count it durably, tell the owner, and requeue, or fail past the limit."""
        unit, settings = self.unit, self.settings
        count = rec.interruptions + 1
        verdict = after_interruption(count, settings.max_interruptions, has_record=True)
        if not verdict.resume:
            failure = Failure.model_validate(
                {
                    "class": str(FailureClass.INFRA_TRANSIENT),
                    "retryable": True,
                    "message": f"interrupted {count} times by platform deploys ({cause}); the limit is "
                    f"{settings.max_interruptions}",
                }
            )
            self.client.hset(unit.record_key, "interruptions", str(count))
            rec.interruptions = count
            note = notice("error", f"Failed (infra_transient): {failure.message}", unit.unit_id)
            return self._settle(rec, state, "failed", failure, extra=[note])
        batch = Batch()
        batch.add("HINCRBY", unit.record_key, "interruptions", "1")
        batch.hset(
            unit.record_key, {"status": "waiting", "waiting_reason": "platform_interrupt", "updated_at": time.time()}
        )
        text = DEPLOY_NOTICE.format(attempt=verdict.attempt, max_attempts=verdict.max_attempts)
        batch.add("RPUSH", keys.transcript(unit.owner_id), dump_message(notice("interrupted", text, unit.unit_id)))
        if unit.driver is Driver.CODING_RUN:
            self._event(
                batch,
                "run.interrupted",
                {"cause": cause, "attempt": verdict.attempt, "max_attempts": verdict.max_attempts, "message": text},
            )
        else:
            self._event(
                batch,
                "turn.retry",
                {
                    "message_id": f"{unit.unit_id}:m{state.rounds_used}",
                    "discarded": True,
                    "reason": "platform interrupt",
                    "cause": cause,
                    "attempt": verdict.attempt,
                    "max_attempts": verdict.max_attempts,
                },
            )
        batch.add("DEL", keys.lease(unit.owner_id))
        self.fence.commit(batch)
        self.client.zrem(keys.ACTIVE, unit.owner_id)
        return Outcome("requeue", f"platform interrupt: {text}")


RUN_SYSTEM = (
    "You are a coding agent working inside a workspace directory. Use the tools to read, write and list "
    "files and to run commands. When the goal is reached, answer with a short summary and no tool calls."
)
