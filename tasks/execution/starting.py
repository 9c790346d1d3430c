"""Where an execution starts: the user's message, `*.started` (or `*.resumed`), the record running and its mark
for the lost-worker sweep, in one fenced write (`take` makes the common first start itself). A mixin of
`Execution`."""

from __future__ import annotations

import time
from collections.abc import Sequence

from agent.loop.policy import Driver
from agent.messages import Message, dump_message, user_text
from agent.messages.media import FileBlock
from tasks.execution.agency import Agency
from tasks.store import keys
from tasks.store.fenced import Batch
from tasks.store.records import UnitRecord


class Starting(Agency):
    task_id: str  # the Celery task running it (empty: the record keeps its own)

    def _first_start(
        self, text: str, history_len: int | str, now: float, files: Sequence[FileBlock] = ()
    ) -> Batch:
        """What a unit's first start writes: the user's message (with its files), `*.started`, the record running
        with its history_len, and its entry for the lost-worker sweep (`take` writes it with the lease when it can)."""
        unit = self.unit
        message = user_text(text, unit.unit_id, tuple(files))
        batch = Batch().add("RPUSH", keys.transcript(unit.owner_id), dump_message(message))
        self._event(batch, f"{unit.event_prefix}.started", {"generation": 0, **self._agent_fields()})
        return self._running_fields(batch, history_len, now)

    def _running_fields(self, batch: Batch, history_len: int | str, now: float) -> Batch:
        fields: dict[str, object] = {
            "status": "running", "waiting_reason": None, "history_len": history_len, **self._agent_fields()
        }
        if self.task_id:  # else the record keeps the task id it has
            fields["task_id"] = self.task_id
        batch.hset(self.unit.record_key, {**fields, "updated_at": now})
        owner = self.unit.owner_id
        batch.add("ZADD", keys.active(owner), str(now), owner)  # alive, for the lost-worker sweep
        return batch

    def _running(self, rec: UnitRecord) -> None:
        """The record as the start left it."""
        rec.status, rec.waiting_reason, rec.task_id = "running", None, self.task_id or rec.task_id

    def _start(self, rec: UnitRecord, transcript: Sequence[object], history: list[Message]) -> None:
        """Start an execution `take` did not start: a later generation, a resume after a drain, a draining
        worker's, or one whose text the script could not place (see tasks/store/take.py)."""
        unit, now = self.unit, time.time()
        if rec.history_len < 0 and rec.generation == 0:
            rec.history_len = len(transcript) + 1
            start = self._first_start(rec.text, rec.history_len, now, rec.files)
            history.append(user_text(rec.text, unit.unit_id, tuple(rec.files)))
        else:
            start = Batch()
            if rec.history_len < 0:
                rec.history_len = len(transcript)
                started = {"generation": rec.generation, **self._agent_fields()}
                self._event(start, f"{unit.event_prefix}.started", started)
            elif rec.waiting_reason == "platform_interrupt":
                self._event(
                    start,
                    f"{unit.event_prefix}.resumed" if unit.driver is Driver.CODING_RUN else "turn.started",
                    {"after_interruptions": rec.interruptions},
                )
            self._running_fields(start, rec.history_len, now)
        if self.choice is not None:
            self._upgrade(start, self.choice)
        self._running(rec)
        self.fence.commit(start)
