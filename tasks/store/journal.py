"""The Redis journal: the `agent.loop.Edge` a real execution uses.

Each step is one fenced write holding the step's record, the unit's step count and the step's
events, so a step is journaled and announced in one round trip, or (for a stale holder) not at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from agent.errors import LeaseLost, LeaseLostUnsent
from agent.events import encode_event
from agent.loop.edge import EventDraft
from agent.messages.media import encode
from tasks.store import keys
from tasks.store.ahead import Ask, round_ahead
from tasks.store.direct import SentAhead
from tasks.store.failover import master_of
from tasks.store.fenced import Batch, Fence, ReplicationUnconfirmed
from tasks.store.preflight import PREFLIGHT
from tasks.store.replicas import REPLICAS, replicas_to_confirm
from tasks.store.replies import text

JOURNAL_RETENTION_MS = 7 * 24 * 3600 * 1000  # an abandoned journal does not outlive a week
# An execution re-arms its journal's expiry on its first write and then once an hour, not with every step:
# the expiry only has to outlast the execution, and a week minus an hour still outlasts any of them.
JOURNAL_REARM_SECONDS = 3600.0
REPLICA_CONFIRM_MS = 2000  # how long a write tool waits for a replica to have its write-ahead entry


@dataclass
class Flags:
    """The stop and drain flags an execution's watcher acts on, read with each tool result's write: `read(stop,
    draining)` hands them over (the watcher's `seen_with_results`).

    `later`, set when each model call of the unit has a preflight (tasks/store/preflight.py): a read tool's result
    is not written on its own but held, and written first in the next call's preflight, with the flags read after
    it (`Riding`); `later()` tells the watcher they come then, and returns what hands them over."""

    stop_key: str
    drain_key: str
    read: Callable[[str | None, bool], None]
    later: Callable[[], Callable[[str | None, bool], None]] | None = None


@dataclass
class Riding:
    """A read tool's result held on the fence, for the next preflight to write (`Preflight.lead`).

    Its write comes before that model call is sent, as its own write would have; between the two only the request
    is built. A crash in between loses the result as one before its own write would have: the resumed execution
    runs the call again, which a read tool allows (a write tool's result, after its write-ahead entry, is written
    at once). When a commit comes first (another result of the round, a park, the settle), the result rides it.
    """

    fence: Fence
    batch: Batch
    reads: Batch
    read: Callable[[str | None, bool], None]

    @contextmanager
    def sending(self) -> Iterator[tuple[Script, list[str], list[Any]] | None]:
        try:
            with self.fence.riding(self.batch, self.reads) as call:
                yield call
        except LeaseLost as lost:  # the step sent ahead of this round found it lost: the attempt is not sent either
            raise LeaseLostUnsent(str(lost)) from None

    def sent_ahead(self, sent: SentAhead) -> None:
        self.fence.riding_ahead(sent)

    def answer(self, reply: Any) -> None:
        try:
            stop, draining = self.fence.answered(reply)
        except LeaseLost as lost:  # in the next attempt's preflight: that attempt is not sent
            raise LeaseLostUnsent(str(lost)) from None
        self.read(text(stop) if stop is not None else None, bool(draining))


class RedisJournal:
    def __init__(
        self,
        client: redis.Redis,
        fence: Fence,
        *,
        owner_id: str,
        unit_id: str,
        generation: int,
        steps_before: int = 0,
        loaded: Mapping[bytes | str, bytes | str] | None = None,
        min_replicas: int = 1,
    ) -> None:
        """`loaded`: the journal hash as already read (with the lease, in the same round trip); else read here.
        `min_replicas`: `BATON_REDIS_MIN_REPLICAS`."""
        self._fence = fence
        self._client = client
        self._decisions: dict[str, dict[str, Any]] | None = None
        self.owner_id = owner_id
        self.approvals_key = keys.approvals(owner_id, unit_id)
        self.key = keys.journal(owner_id, unit_id, generation)
        self.record_key = keys.record(owner_id, unit_id)
        self.events_key = keys.events(owner_id)
        self.steps: dict[str, dict[str, Any]] = {
            text(k): json.loads(v) for k, v in (client.hgetall(self.key) if loaded is None else loaded).items()
        }
        self._armed_at: float | None = None  # when this execution last set the journal's expiry
        self.done_steps = steps_before + sum(1 for s in self.steps.values() if s.get("status") == "done")
        # Behind Sentinel, a write tool's write-ahead entry must reach the master's replicas (at most
        # `min_replicas`) before the tool runs: Redis replicates asynchronously, and a failover that lost the entry
        # would let a replay run the tool again (tasks/store/replicas.py).
        self.master = master_of(client, self.key)  # None: one plain Redis, nothing to confirm with
        self.sentinel = self.master is not None
        self.min_replicas = min_replicas
        self.flags: Flags | None = None  # set by the execution once its watcher is up
        # What the next model call's preflight asks, for a round's end to send ahead (`round_done`); set by the
        # execution.
        self.asks: Callable[[], Ask] | None = None

    def decision(self, tool_use_id: str) -> dict[str, Any] | None:
        """A decision on a call that waited for approval (read once per execution: decisions only arrive
        while the unit is parked, so none can appear during the execution that reads them)."""
        if self._decisions is None:
            self._decisions = {text(k): json.loads(v) for k, v in self._client.hgetall(self.approvals_key).items()}
        return self._decisions.get(tool_use_id)

    def recorded(self, step_id: str) -> dict[str, Any] | None:
        return self.steps.get(step_id)

    def record(
        self, step_id: str, record: dict[str, Any], events: list[EventDraft], *, last: bool = False,
        reads_next: bool = False, writes_next: bool = False,
    ) -> None:
        """Journal a step in one fenced write; the loop's `last` step rides with the settle's write (`Fence.hold`). A
        step whose round starts with a read tool (`reads_next`) is sent ahead: the round's reads run while the store
        applies it, and its reply is read by the next write (`Fence.send_ahead`): a read tool's result, the next
        model call's preflight, a write tool's write-ahead entry or an approval's request.
        A step whose round starts with a write tool (`writes_next`) is held for that tool's write-ahead entry, one
        write for both: the entry is written before the tool runs, and so is the step with it.

        Holding it widens no window: the settle follows with no I/O between (behind Sentinel or on a cluster its
        write checks the replication history itself, and one that finds a failover writes nothing and keeps the
        step held for the settle it makes instead), and a crash before the joint write re-asks the model exactly as
        a crash before the step's own write would have; after it, the unit is settled.
        """
        prior = self.steps.get(step_id)
        confirm = 0
        if record.get("status") == "committing" and self.sentinel:
            confirm = replicas_to_confirm(REPLICAS.count(self.master or self._client), self.min_replicas)
            if not confirm:
                # No replica online (right after a failover, say): nothing a failover could promote over the entry,
                # so the tool runs, and its outcome says it ran unreplicated.
                record = {**record, "unreplicated": True}
        elif record.get("status") == "done" and prior is not None and prior.get("unreplicated"):
            # The edge, not the loop, knows how the entry was written: the tool's result and its event say it too.
            record = {**record, "unreplicated": True}
            events = [
                (kind, {**data, "unreplicated": True} if kind == "tool.result" else data) for kind, data in events
            ]
        batch = Batch().hset(self.key, {step_id: json.dumps(record)}, raw=True)
        now = time.monotonic()
        arming = self._armed_at is None or now - self._armed_at >= JOURNAL_REARM_SECONDS
        if arming:
            batch.add("PEXPIRE", self.key, str(JOURNAL_RETENTION_MS))
        if record.get("status") == "done" and step_id != "seed":
            fields: dict[str, Any] = {"steps": self.done_steps + 1, "updated_at": time.time()}
            if "unit_usage" in record:  # a model step: `baton status` shows the usage so far, mid-run
                fields["usage"] = record["unit_usage"]
            batch.hset(self.record_key, fields)
        self.add_events(batch, events)
        if confirm:
            try:
                self._fence.commit(batch, replicas=confirm, timeout_ms=REPLICA_CONFIRM_MS, via=self.master)
            except ReplicationUnconfirmed as err:
                raise self._unconfirmed(step_id, record, prior, err) from None
        elif last or writes_next:
            self._fence.hold(batch)
        elif self.flags is not None and step_id.startswith("tool:") and record.get("status") == "done":
            # A tool's result, written after it ran: the stop and drain flags are read with it, so the loop's look
            # between this round and the next step costs no round trip of its own (`Flags`).
            reads = Batch().read("GET", self.flags.stop_key).read("EXISTS", self.flags.drain_key)
            if self.flags.later is not None and prior is None:  # no write-ahead entry: a read tool's
                self._fence.hold(batch)
                PREFLIGHT.lead(Riding(self._fence, batch, reads, self.flags.later()))
            else:
                stop, draining = self._fence.commit(batch.extend(reads))[-2:]
                self.flags.read(text(stop) if stop is not None else None, bool(draining))
        elif reads_next:
            self._fence.send_ahead(batch)
        else:
            self._fence.commit(batch)
        if arming:
            self._armed_at = now
        if record.get("status") == "done" and step_id != "seed":
            self.done_steps += 1
        self.steps[step_id] = record

    def _unconfirmed(
        self, step_id: str, record: dict[str, Any], prior: dict[str, Any] | None, err: ReplicationUnconfirmed
    ) -> ReplicationUnconfirmed:
        """Mark a write-ahead entry no replica confirmed as `unconfirmed`, and say why the tool did not run.

        The entry is on the master, but the tool never started: an execution that resumes the unit must run it,
        not answer it `[Interrupted before result was recorded]` as it would a `committing` entry. The mark is a
        write of its own (WAIT only answers after the entry's write): a failover that kept the entry and lost the
        mark leaves `committing`, and the call is then answered as interrupted, never run twice.
        """
        # The count WAIT asked for may be stale: a replica gone, a new master.
        REPLICAS.forget(self.master or self._client)
        waits = int(prior.get("waits", 0)) + 1 if prior is not None and prior.get("status") == "unconfirmed" else 1
        name = str(record.get("name"))
        mark = {"kind": "tool", "status": "unconfirmed", "name": name, "waits": waits}
        self._fence.commit(Batch().hset(self.key, {step_id: json.dumps(mark)}, raw=True))
        self.steps[step_id] = mark
        return ReplicationUnconfirmed(
            f"the write tool {name!r} was not run: {err}, so a failover could lose its write-ahead entry and a "
            "replay run it twice",
            step_id=step_id,
            name=name,
            waits=waits,
        )

    def round_done(self) -> None:
        """A round's results are all journaled or held: what the next model call's preflight asks goes now, with the
        read tools' results held for it (tasks/store/ahead.py), its replies read by the preflight."""
        if self.asks is not None:
            round_ahead(self._client, self.asks())

    def unreplicated(self) -> list[str]:
        """The tool_use_ids of this generation's write tools that ran with no replica to confirm their entry."""
        return sorted(
            step[5:] for step, rec in self.steps.items() if step.startswith("tool:") and rec.get("unreplicated")
        )

    def keep_files(self, files: Mapping[str, bytes]) -> None:
        """Store a step's files in the owner's file store (tasks/store/files.py), fenced: a stale holder writes
        nothing. Content-addressed, so a replay storing them again changes nothing."""
        if files:
            self._fence.commit(Batch().hset(keys.files(self.owner_id), {sha: encode(d) for sha, d in files.items()},
                                            raw=True))

    def emit(self, events: list[EventDraft]) -> None:
        batch = Batch()
        self.add_events(batch, events)
        self._fence.commit(batch)

    def add_events(self, batch: Batch, events: list[EventDraft]) -> Batch:
        for kind, data in events:
            batch.xadd(self.events_key, encode_event(kind, self.owner_id, data))
        return batch
