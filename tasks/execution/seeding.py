"""Where a generation starts: its journaled seed, a stored round to resume (a retry within the round's TTL), or
nothing. A mixin of `Execution`."""

from __future__ import annotations

import time

from agent.history.rounds import load_round, seed_state, usable_round
from agent.loop.state import LoopState, Usage
from agent.messages import RESUMED_NOTICE, dump_message, notice
from tasks.execution.agency import Agency
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.journal import RedisJournal
from tasks.store.records import UnitRecord


class Seeding(Agency):
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

