"""Whether a delivered unit may run now, and what it starts from, read with its lease. A mixin of `Execution`.

A turn behind its chat's head waits for the settle ahead of it; a lease another execution holds turns the message
away or defers it; otherwise the lease comes with the record, the stop and drain flags, the history, and a started
generation's journal and live marks, in the take's round trip or (rarely) one of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.execution.agency import Agency
from tasks.execution.settling import Outcome
from tasks.store import keys
from tasks.store.lease import Lease, holder_unit
from tasks.store.reads import chat_head
from tasks.store.records import UnitRecord
from tasks.store.replies import text_or_none
from tasks.store.take import Taken


@dataclass(frozen=True)
class Loaded:
    """What an execution read with its lease: the stop and drain flags, its journal, live marks, history."""

    stop: str | None
    draining: bool
    journal: dict[bytes | str, bytes | str]
    live: dict[bytes | str, bytes | str]
    transcript: list[bytes | str]
    started: bool = False  # `take` wrote the start already


def stopping(loaded: Loaded, rec: UnitRecord) -> bool:
    """Whether the unit is to stop as it starts: the stop key names it (or all), or a new message interrupted it
    while it was queued (`stop_reason`, written with that message's enqueue, read with the lease)."""
    return keys.stop_names(loaded.stop, rec.unit_id) or rec.stop_reason is not None


class Holding(Agency):
    hostname: str

    def _hold(self, rec: UnitRecord, taken: Taken, lease: Lease) -> Loaded | Outcome:
        """What the execution starts from, read with its lease; or what to do with the message when it may not run
        now (a turn behind its head, a lease another execution holds)."""
        unit, client = self.unit, self.client
        loaded: Loaded | None
        if taken.acquired is None:
            # Another id at the head may be a finished turn not yet cleared: `chat_head` clears it on the way.
            if chat_head(client, unit.owner_id) != unit.unit_id:
                # No polling: the settle of the turn ahead publishes this one when it leaves the queue.
                return Outcome("drop", "an earlier turn of this chat is unfinished; its settle starts this one")
            # The head now, once finished turns were cleared (rare). The lease comes in a round trip of its own
            # here, so the record is read again with it: a duplicate copy whose unit settled and freed its lease
            # in between would otherwise run it again from the record it read before.
            retaken = self._take_lease(rec, lease)
            if retaken is not None and retaken[1] != taken.record:
                lease.release()
                return Outcome("defer", "its record changed while its lease was taken; decided again", 0.0)
            loaded = retaken[0] if retaken is not None else None
        else:
            loaded = self._loaded(rec, taken) if taken.acquired else None
        if loaded is None:
            if holder_unit(lease.holder()) == unit.unit_id:
                return Outcome("drop", "a live execution of this unit holds its lease")
            # Not the queue's doing (a turn waits for its head's hand-off above): a holder the chat's
            # queue no longer names, e.g. one the sweep gave up on that is still running. Rare; retried.
            return Outcome("defer", "another unit of this owner holds the lease", 0.2)
        return loaded

    def _take_lease(self, rec: UnitRecord, lease: Lease) -> tuple[Loaded, dict[bytes | str, bytes | str]] | None:
        """Take the lease and, in the same round trip, read what the execution starts from and the record as it
        is now (None: not taken).

        The reads run after the SET on the same connection, so once the lease is ours they see every write of
        the previous holder (its writes are fenced, so none can land after we hold the lease).
        """
        unit = self.unit
        pipe = self.client.pipeline(transaction=False)
        pipe.set(lease.key, lease.token, nx=True, px=lease.ttl_ms)
        pipe.hgetall(unit.record_key)
        pipe.get(keys.stop(unit.owner_id))
        pipe.exists(keys.drain(self.hostname, self.unit.owner_id))
        # A started generation reads its history up to its own messages; a new one reads all of it.
        pipe.lrange(keys.transcript(unit.owner_id), 0, rec.history_len - 1 if rec.history_len >= 0 else -1)
        started = rec.history_len >= 0
        if started:
            # Only a generation whose start was committed can have journaled steps or streamed text.
            pipe.hgetall(keys.journal(unit.owner_id, unit.unit_id, rec.generation))
            pipe.hgetall(keys.live(unit.owner_id, unit.unit_id, rec.generation))
        acquired, record_now, stop, draining, transcript, *rest = pipe.execute()
        if not acquired:
            return None
        journal, live = rest if started else ({}, {})
        return Loaded(text_or_none(stop), bool(draining), journal, live, transcript), record_now

    def _loaded(self, rec: UnitRecord, taken: Taken) -> Loaded:
        """What `take` read with the lease, and a started generation's journal and live marks (read after it)."""
        journal: dict[bytes | str, bytes | str] = {}
        live: dict[bytes | str, bytes | str] = {}
        if rec.history_len >= 0 and not taken.started:
            # Only a generation whose start was committed before can have journaled steps or streamed text.
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(keys.journal(self.unit.owner_id, self.unit.unit_id, rec.generation))
            pipe.hgetall(keys.live(self.unit.owner_id, self.unit.unit_id, rec.generation))
            journal, live = pipe.execute()
        return Loaded(taken.stop, taken.draining, journal, live, taken.transcript or [], taken.started)
