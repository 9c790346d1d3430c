"""Settles that hand a unit back to the queue instead of ending it: a drain, and a write whose write-ahead entry no
replica confirmed. Both keep the unit's journal, so the execution that picks it up replays what ran; a drain counts
against the unit's interruption limit, a replication wait against its own (agent/loop/policy.py)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from agent.loop.failures import FailureClass
from agent.loop.policy import Driver, after_interruption, after_unconfirmed, compute_backoff, policy_for
from agent.loop.state import LoopState
from agent.messages import DEPLOY_NOTICE, dump_message, notice
from tasks.execution import wiring
from tasks.execution.settling import Outcome, Settling
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.records import Failure, UnitRecord

if TYPE_CHECKING:
    from tasks.store.fenced import ReplicationUnconfirmed

log = logging.getLogger("baton.execution")


class Requeueing(Settling):
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
            # Keep what the unit finished, so a retry within the TTL goes on from it instead of redoing it.
            round_raw = self._stored_round(state)
            return self._settle(rec, state, "failed", failure, extra=[note], round_raw=round_raw)
        batch = Batch()
        batch.add("HINCRBY", unit.record_key, "interruptions", "1")
        batch.hset(
            unit.record_key, {"status": "waiting", "waiting_reason": "platform_interrupt", "updated_at": time.time()}
        )
        text = DEPLOY_NOTICE.format(attempt=verdict.attempt, max_attempts=verdict.max_attempts)
        batch.add("RPUSH", keys.transcript(unit.owner_id), dump_message(notice("interrupted", text, unit.unit_id)))
        cut = self._cut()
        if unit.driver is Driver.CODING_RUN:
            if cut:
                self._event(batch, "run.step", {**cut, "discarded": True, "reason": "platform interrupt"})
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
                    **cut,  # the provider attempt the drain cut, if one was streaming
                    "discarded": True,
                    "reason": "platform interrupt",
                    "cause": cause,
                    "interruption": verdict.attempt,
                    "max_interruptions": verdict.max_attempts,
                },
            )
        batch.add("DEL", keys.lease(unit.owner_id))
        batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)  # not running: nothing for the lost-worker sweep
        self.fence.commit(batch)
        return Outcome("requeue", f"platform interrupt: {text}")

    def _unconfirmed(self, rec: UnitRecord, state: LoopState, err: ReplicationUnconfirmed) -> Outcome:
        """A write tool's write-ahead entry that no replica confirmed in time: the tool did not run. The unit goes
        back to the queue, keeping its journal, and is resumed after the policy's backoff (the journal replays what
        ran, and the tool runs once its entry is confirmed); past `MAX_REPLICATION_WAITS` it fails as
        `infra_transient`, retryable."""
        unit, cls = self.unit, FailureClass.INFRA_TRANSIENT
        verdict = after_unconfirmed(err.waits)
        if not verdict.resume:
            failure = Failure.model_validate(
                {
                    "class": str(cls),
                    "retryable": policy_for(unit.driver, cls).retryable,
                    "message": f"{err} (unconfirmed {err.waits} times)",
                }
            )
            note = notice("error", f"Failed ({cls}): {failure.message}", unit.unit_id)
            return self._settle(rec, state, "failed", failure, extra=[note], round_raw=self._stored_round(state))
        delay = compute_backoff(verdict.attempt, wiring.backoff(self.settings))
        log.info("%s %s waits %.1fs for the store's replica: %s", unit.event_prefix, unit.unit_id, delay, err)
        batch = Batch()
        batch.hset(unit.record_key, {"status": "queued", "updated_at": time.time()})
        waiting = {
            "discarded": False,  # nothing streamed is void: the model step that asked for the tool is journaled
            "class": str(cls),
            "reason": str(err),
            "replication_wait": verdict.attempt,
            "max_replication_waits": verdict.max_attempts,
            "retry_in": round(delay, 3),
        }
        if unit.driver is Driver.CHAT_TURN:
            asked = state.messages[-1].message_id if state.messages else None
            self._event(batch, "turn.retry", {"message_id": asked or f"{unit.unit_id}:m{state.rounds_used}", **waiting})
        else:
            self._event(
                batch,
                "run.step",
                {"step": err.step_id, "kind": "tool", "name": err.name, "status": "unconfirmed", **waiting},
            )
        batch.add("DEL", keys.lease(unit.owner_id))
        batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)  # not running: nothing for the lost-worker sweep
        self.fence.commit(batch)
        return Outcome("auto_resume", f"{cls}: waiting for the store's replica", delay)
