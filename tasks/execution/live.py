"""Live text in Redis: a model step's text deltas (and its reasoning's, `reasoning.delta`), batched into the unit's
event stream as they stream.

Deltas are buffered and written about every `FLUSH_SECONDS`, never per token: by the process's one
`LiveWriter`, all its streaming units' text in one round trip (or by the streaming thread itself past
`FLUSH_CHARS`, and by any commit of the unit's own, which takes the buffer with it). They go out under
the unit's `Fence`, as its prelude or under its lock, so every event the execution writes is preceded in
the stream by all text streamed before it, and a stale holder publishes no text at all.
Which attempts of a step streamed text, and which were discarded since, is kept per generation in
`keys.live`, so an execution after a drain or a lost worker numbers its attempts on and voids the
text a dead worker left behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

import redis

from agent.events import REASONING_DELTA, TEXT_DELTA, encode_event
from agent.loop.live import StepStart
from tasks.execution.live_writer import LiveWriter, live_writer
from tasks.store import keys
from tasks.store.fenced import Batch, Fence

FLUSH_SECONDS = 0.05
FLUSH_CHARS = 400
LIVE_RETENTION_MS = 7 * 24 * 3600 * 1000  # like the journal: an abandoned record does not outlive a week


class RedisLiveText:
    """The `agent.loop.live.LiveText` of one execution; `close()` it when the execution ends."""

    def __init__(
        self,
        client: redis.Redis,
        fence: Fence,
        *,
        owner_id: str,
        unit_id: str,
        generation: int,
        loaded: Mapping[bytes | str, bytes | str] | None = None,
        writer: LiveWriter | None = None,
    ) -> None:
        """`loaded`: the attempt marks as already read (with the lease, in the same round trip); else read lazily."""
        self._client = client
        self.fence = fence
        self._owner_id = owner_id
        self._unit_id = unit_id
        self._key = keys.live(owner_id, unit_id, generation)
        self._events_key = keys.events(owner_id)
        self._cv = threading.Condition()
        # (kind, message id, attempt, text), in stream order, coalesced while the kind and attempt stay the same
        self._pending: list[tuple[str, str, int, str]] = []
        self._pending_chars = 0
        self._next_index: dict[tuple[str, str, int], int] = {}  # each kind's deltas of an attempt numbered apart
        self._attempts: dict[str, dict[str, int]] | None = None  # message id -> {"started", "discarded"}
        if loaded is not None:
            self._attempts = _marks(loaded)
        self._dirty: set[str] = set()
        self._in_flight: tuple[str, int] | None = None
        self._closed = False
        self._writer = writer
        self._asked = False  # a write is asked of the writer and not yet made
        fence.prelude = self._take

    # -- agent.loop.live.LiveText -----------------------------------------------------------------------

    def begin(self, message_id: str) -> StepStart:
        attempts = self._load().get(message_id)
        if attempts is None:
            return StepStart(0)
        started, discarded = attempts["started"], attempts["discarded"]
        return StepStart(started, orphaned=started if started > discarded else None)

    def text(self, message_id: str, attempt: int, text: str) -> None:
        self._add(TEXT_DELTA, message_id, attempt, text)

    def reasoning(self, message_id: str, attempt: int, text: str) -> None:
        self._add(REASONING_DELTA, message_id, attempt, text)

    def _add(self, kind: str, message_id: str, attempt: int, text: str) -> None:
        """Buffer a delta of `kind` (`text.delta`, `reasoning.delta`): an attempt that streamed either is started,
        and is the one in flight (a stop voids it)."""
        if not text:
            return
        with self._cv:
            attempts = self._load().setdefault(message_id, {"started": 0, "discarded": 0})
            if attempts["started"] < attempt:
                attempts["started"] = attempt
                self._dirty.add(message_id)
            self._in_flight = (message_id, attempt)
            if self._pending and self._pending[-1][:3] == (kind, message_id, attempt):
                self._pending[-1] = (kind, message_id, attempt, self._pending[-1][3] + text)
            else:
                self._pending.append((kind, message_id, attempt, text))
            self._pending_chars += len(text)
            due = self._pending_chars >= FLUSH_CHARS
            if not due and not self._asked:
                self._ask()
        if due:
            self.fence.commit(Batch())

    def discarded(self, message_id: str, attempt: int) -> None:
        with self._cv:
            attempts = self._load().setdefault(message_id, {"started": 0, "discarded": 0})
            if attempts["discarded"] < attempt:
                attempts["discarded"] = attempt
                self._dirty.add(message_id)
            if self._in_flight == (message_id, attempt):
                self._in_flight = None

    def ended(self, message_id: str) -> None:
        with self._cv:
            if self._in_flight is not None and self._in_flight[0] == message_id:
                self._in_flight = None

    # -- for the settle ----------------------------------------------------------------------------

    def cut(self) -> tuple[str, int] | None:
        """The attempt that was streaming when the unit stopped, marked discarded (the settle says so)."""
        with self._cv:
            cut = self._in_flight
        if cut is not None:
            self.discarded(*cut)
        return cut

    def close(self) -> None:
        """No more writes by the writer; text still buffered goes out with the next commit (the settle's)."""
        with self._cv:
            self._closed = True

    # -- the buffer ----------------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, int]]:
        if self._attempts is None:
            self._attempts = _marks(self._client.hgetall(self._key))
        return self._attempts

    def _take(self) -> Batch:
        """The fence's prelude: buffered deltas and attempt marks, emptied into the batch being written."""
        batch = Batch()
        with self._cv:
            for kind, message_id, attempt, text in self._pending:
                index = self._next_index.get((kind, message_id, attempt), 0)
                self._next_index[(kind, message_id, attempt)] = index + 1
                data = {"turn_id": self._unit_id, "message_id": message_id, "attempt": attempt, "index": index}
                batch.xadd(self._events_key, encode_event(kind, self._owner_id, {**data, "text": text}))
            if self._dirty and self._attempts is not None:
                marks = {m: json.dumps(self._attempts[m]) for m in sorted(self._dirty)}
                batch.hset(self._key, marks, raw=True).add("PEXPIRE", self._key, str(LIVE_RETENTION_MS))
            self._pending.clear()
            self._pending_chars = 0
            self._dirty.clear()
        return batch

    def _ask(self) -> None:
        """Ask the process's writer for a write (called holding `_cv`)."""
        if self._writer is None:
            self._writer = live_writer(self._client, interval=FLUSH_SECONDS)
        self._asked = True
        self._writer.ask(self)

    # -- for the writer (it holds the fence's lock) ---------------------------------------------------

    def take(self) -> Batch | None:
        with self._cv:
            self._asked = False
            if self._closed:
                return None
        return self._take() or None

    def again(self) -> None:
        with self._cv:
            if not self._closed:
                self._ask()


def _marks(raw: Mapping[bytes | str, bytes | str]) -> dict[str, dict[str, int]]:
    return {(k.decode() if isinstance(k, bytes) else k): json.loads(v) for k, v in raw.items()}
