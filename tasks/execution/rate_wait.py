"""A unit whose endpoint asks for a longer wait than `BATON_RATE_WAIT` goes back to the queue for it: a mixin of
`Execution`.

Nothing was sent (the gate said no before the attempt), so nothing is discarded and no retry budget is spent: the
unit keeps its journal and generation, waits as `waiting` with `waiting_reason: rate_limited`, says so in a
`turn.retry` (a chat turn) or `run.step` (a coding run) event, and its message comes back after the wait, when the
execution that takes it replays what was journaled and asks the gate again.
"""

from __future__ import annotations

import logging
import time

from agent.loop.edge import LoopConfig
from agent.loop.failures import FailureClass
from agent.loop.model_step import step_message_id
from agent.loop.policy import Driver
from agent.loop.state import LoopState
from agent.provider.rate_gate import RateLimited
from tasks.execution.settling import Outcome, Settling
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.records import UnitRecord

log = logging.getLogger("baton.execution")


class RateWaiting(Settling):
    def _rate_limited(self, rec: UnitRecord, state: LoopState, config: LoopConfig, wait: RateLimited) -> Outcome:
        """Hand the unit back to the queue for `wait.delay` seconds, in one fenced write."""
        unit = self.unit
        delay = round(wait.delay, 3)
        log.info("%s %s waits %.1fs for its endpoint's rate limit (%s)", unit.event_prefix, unit.unit_id, delay,
                 wait.reason)
        batch = Batch().hset(
            unit.record_key, {"status": "waiting", "waiting_reason": "rate_limited", "updated_at": time.time()}
        )
        said = {
            "discarded": False,  # nothing was sent: the wait is not an attempt
            "class": str(FailureClass.PROVIDER_RATE_LIMITED),
            "cause": "rate_limited",
            "reason": str(wait),
            "limit": wait.reason,
            "retry_in": delay,
        }
        if unit.driver is Driver.CHAT_TURN:
            self._event(batch, "turn.retry", {"message_id": step_message_id(config, state), **said})
        else:
            step = {"step": f"model:{state.rounds_used}", "kind": "model", "status": "rate_limited"}
            self._event(batch, "run.step", {**step, **said})
        batch.add("DEL", keys.lease(unit.owner_id))
        batch.add("ZREM", keys.active(unit.owner_id), unit.owner_id)  # not running: nothing for the lost-worker sweep
        self.fence.commit(batch)
        rec.status, rec.waiting_reason = "waiting", "rate_limited"
        # The reason starts with the class: the next execution's span says it came back for a rate limit.
        return Outcome("auto_resume", f"{FailureClass.PROVIDER_RATE_LIMITED}: {wait}", delay)
