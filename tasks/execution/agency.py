"""Which agent an execution runs, and what it writes about it: a mixin of `Execution`.

A unit's agent is resolved when it first starts (the caller's pick, the chat's, else the fleet's default) and
recorded on it (name, version, model); every later execution runs that version (pinned), or moves to the
worker's with `upgrade=True` (an `agent.changed` event and the notice), or, on a worker that does not serve the
agent at all, hands the unit back until `BATON_AGENT_WAIT` has passed, then fails it as `agent_unknown`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from agent.agents.pinning import Choice, choose, chosen_model
from agent.history.context import context_window
from agent.loop.edge import LoopConfig
from agent.loop.failures import FailureClass
from agent.loop.policy import Driver
from agent.loop.state import LoopState
from agent.messages import dump_message, notice
from tasks.execution import wiring
from tasks.execution.requeue import Requeueing
from tasks.execution.settling import Outcome
from tasks.store import agents as published
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.records import Failure, UnitRecord

if TYPE_CHECKING:
    pass

log = logging.getLogger("baton.execution")



def agent_unknown_failure(name: str, waited: float) -> Failure:
    return Failure.model_validate(
        {
            "class": str(FailureClass.AGENT_UNKNOWN),
            "retryable": True,
            "message": f"no worker serves agent {name!r}; it waited {waited:.0f} s for one (BATON_AGENT_WAIT)",
        }
    )


class Agency(Requeueing):
    choice: Choice | None = None
    model: str = ""

    def _agent_fields(self) -> dict[str, object]:
        """The record's and `*.started` event's words on what runs the unit."""
        agent = self.choice.agent if self.choice is not None else None
        if agent is None:
            return {}
        return {"agent": agent.name, "agent_version": agent.version, "model": self.model}

    def _adopt(self, rec: UnitRecord, choice: Choice) -> None:
        """Run as `choice` says from now on (the record as the start will have written it)."""
        assert choice.agent is not None
        self.choice = choice
        self.model = chosen_model(choice.agent, rec.model)
        rec.agent, rec.agent_version, rec.model = choice.agent.name, choice.agent.version, self.model

    def _choose(self, rec: UnitRecord) -> Choice:
        """The definition this execution runs `rec` with (reads a recorded one back only when versions differ)."""
        mine = wiring.agents(self.settings).get(rec.agent)
        return choose(rec.agent_version, mine, lambda version: published.definition(self.client, version))

    def _upgrade(self, batch: Batch, choice: Choice) -> None:
        """An upgraded unit says so: `agent.changed` and the contract's notice, in the start's write."""
        text = choice.notice
        if text is None or choice.agent is None:
            return
        self._event(batch, "agent.changed", {"agent": choice.agent.name, "from": choice.upgraded_from,
                                             "to": choice.agent.version})
        batch.add("RPUSH", keys.transcript(self.unit.owner_id), dump_message(notice("agent", text, self.unit.unit_id)))
        log.info("%s: agent %s upgraded %s -> %s", self.unit.owner_id, choice.agent.name, choice.upgraded_from,
                 choice.agent.version)

    def _system(self) -> str | None:
        """The system prompt: the agent's instructions; a run's come after Baton's own for coding runs."""
        agent = self.choice.agent if self.choice is not None else None
        instructions = agent.instructions if agent is not None else None
        if self.unit.driver is Driver.CODING_RUN:
            return f"{RUN_SYSTEM}\n\n{instructions}" if instructions else RUN_SYSTEM
        return instructions

    def _config(self, rec: UnitRecord) -> LoopConfig:
        """The loop's configuration: the unit's agent (model, instructions, settings) and the fleet's limits."""
        settings, unit = self.settings, self.unit
        is_run = unit.driver is Driver.CODING_RUN
        return LoopConfig(
            owner_id=unit.owner_id,
            turn_id=unit.unit_id,
            driver=unit.driver,
            model=self.model or settings.model,
            max_rounds=settings.run_max_steps if is_run else settings.max_rounds,
            retry_budget=settings.retry_budget,
            backoff=wiring.backoff(settings),
            system=self._system(),
            deadline=time.monotonic() + settings.run_wall_clock if is_run else None,
            stop_grace=settings.stop_grace,
            drain_grace=settings.drain_grace,
            # A new generation starts a new journal, so its steps get new ids (a resume keeps the old rounds').
            message_prefix=unit.unit_id if rec.generation == 0 else f"{unit.unit_id}:g{rec.generation}",
            prompt_cache=settings.prompt_cache == "on",
            context_tokens=settings.context_tokens or context_window(self.model or settings.model),
            max_tokens=agent.max_tokens if (agent := self.choice.agent if self.choice else None) else 4096,
            temperature=agent.temperature if agent is not None else None,
            thinking=agent.thinking if agent is not None else None,
            price=agent.price if agent is not None else None,
        )


    def _hand_back(self, rec: UnitRecord, *, started: bool) -> Outcome | None:
        """A worker that does not serve the unit's agent hands it back for another (None: the wait is over, and the
        caller fails it as `agent_unknown`)."""
        now = time.time()
        since = rec.agent_wait_since if rec.agent_wait_since is not None else now
        if now - since >= self.settings.agent_wait:
            return None
        batch = Batch().hset(
            self.unit.record_key,
            {"status": "waiting", "waiting_reason": "agent_unavailable", "agent_wait_since": since, "updated_at": now},
        )
        if started:
            batch.add("ZREM", keys.active(self.unit.owner_id), self.unit.owner_id)  # not running: not the sweep's
        batch.add("DEL", keys.lease(self.unit.owner_id))
        self.fence.commit(batch)
        delay = min(HAND_BACK_SECONDS, max(0.2, self.settings.agent_wait - (now - since)))
        return Outcome("defer", f"this worker does not serve agent {rec.agent or '(default)'!r}", delay)

    def _agent_unknown(self, rec: UnitRecord) -> Outcome:
        since = rec.agent_wait_since if rec.agent_wait_since is not None else time.time()
        failure = agent_unknown_failure(rec.agent or "(default)", time.time() - since)
        note = notice("error", f"Failed (agent_unknown): {failure.message}", self.unit.unit_id)
        return self._settle(rec, LoopState(), "failed", failure, extra=[note])


# A unit no worker here can run comes back after this (or sooner, when its wait ends sooner).
HAND_BACK_SECONDS = 2.0

RUN_SYSTEM = (
    "You are a coding agent working inside a workspace directory. Use the tools to read, write and list "
    "files and to run commands. When the goal is reached, answer with a short summary and no tool calls."
)
