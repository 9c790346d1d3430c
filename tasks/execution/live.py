"""Live text in Redis: a model step's text deltas, batched into the unit's event stream as they stream.

Deltas are buffered and written at most every `FLUSH_SECONDS` (or sooner past `FLUSH_CHARS`), never
per token: by the streaming thread when a delta finds the interval over, else by the process's one
`TrailingFlusher` once it is. They go out through the unit's `Fence` as its prelude, so every event the execution writes
is preceded in the stream by all text streamed before it, and a stale holder publishes no text at all.
Which attempts of a step streamed text, and which were discarded since, is kept per generation in
`keys.live`, so an execution after a drain or a lost worker numbers its attempts on and voids the
text a dead worker left behind.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping

import redis

from agent.errors import LeaseLost
from agent.events import TEXT_DELTA, encode_event
from agent.live import StepStart
from tasks.execution.trailing import TrailingFlusher, trailing_flusher
from tasks.store import keys
from tasks.store.fenced import Batch, Fence

log = logging.getLogger("baton.live")

FLUSH_SECONDS = 0.05
FLUSH_CHARS = 400
LIVE_RETENTION_MS = 7 * 24 * 3600 * 1000  # like the journal: an abandoned record does not outlive a week


class RedisLiveText:
    """The `agent.live.LiveText` of one execution; `close()` it when the execution ends."""

    def __init__(
        self,
        client: redis.Redis,
        fence: Fence,
        *,
        owner_id: str,
        unit_id: str,
        generation: int,
        clock: Callable[[], float] = time.monotonic,
        loaded: Mapping[bytes | str, bytes | str] | None = None,
        flusher: TrailingFlusher | None = None,
    ) -> None:
        """`loaded`: the attempt marks as already read (with the lease, in the same round trip); else read lazily."""
        self._client = client
        self._fence = fence
        self._owner_id = owner_id
        self._unit_id = unit_id
        self._key = keys.live(owner_id, unit_id, generation)
        self._events_key = keys.events(owner_id)
        self._clock = clock
        self._cv = threading.Condition()
        self._pending: list[tuple[str, int, str]] = []  # (message id, attempt, text), coalesced per attempt
        self._pending_chars = 0
        self._next_index: dict[tuple[str, int], int] = {}
        self._attempts: dict[str, dict[str, int]] | None = None  # message id -> {"started", "discarded"}
        if loaded is not None:
            self._attempts = _marks(loaded)
        self._dirty: set[str] = set()
        self._in_flight: tuple[str, int] | None = None
        self._last_flush = float("-inf")
        self._closed = False
        self._flusher = flusher
        self._scheduled = False  # a trailing flush is asked of the flusher and not yet looked at
        fence.prelude = self._take

    # -- agent.live.LiveText -----------------------------------------------------------------------

    def begin(self, message_id: str) -> StepStart:
        attempts = self._load().get(message_id)
        if attempts is None:
            return StepStart(0)
        started, discarded = attempts["started"], attempts["discarded"]
        return StepStart(started, orphaned=started if started > discarded else None)

    def text(self, message_id: str, attempt: int, text: str) -> None:
        if not text:
            return
        with self._cv:
            attempts = self._load().setdefault(message_id, {"started": 0, "discarded": 0})
            if attempts["started"] < attempt:
                attempts["started"] = attempt
                self._dirty.add(message_id)
            self._in_flight = (message_id, attempt)
            if self._pending and self._pending[-1][:2] == (message_id, attempt):
                self._pending[-1] = (message_id, attempt, self._pending[-1][2] + text)
            else:
                self._pending.append((message_id, attempt, text))
            self._pending_chars += len(text)
            wait = self._last_flush + FLUSH_SECONDS - self._clock()
            due = self._pending_chars >= FLUSH_CHARS or wait <= 0
            if not due and not self._scheduled:
                self._schedule(wait)
        if due:
            self._fence.commit(Batch())

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
        """No more trailing flushes; text still buffered goes out with the next commit (the settle's)."""
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
            for message_id, attempt, text in self._pending:
                index = self._next_index.get((message_id, attempt), 0)
                self._next_index[(message_id, attempt)] = index + 1
                data = {"turn_id": self._unit_id, "message_id": message_id, "attempt": attempt, "index": index}
                batch.xadd(self._events_key, encode_event(TEXT_DELTA, self._owner_id, {**data, "text": text}))
            if self._dirty and self._attempts is not None:
                marks = {m: json.dumps(self._attempts[m]) for m in sorted(self._dirty)}
                batch.hset(self._key, marks, raw=True).add("PEXPIRE", self._key, str(LIVE_RETENTION_MS))
            if self._pending:
                self._last_flush = self._clock()
            self._pending.clear()
            self._pending_chars = 0
            self._dirty.clear()
        return batch

    def _schedule(self, wait: float) -> None:
        """Ask the process's flusher for a look once the interval is up (called holding `_cv`)."""
        if self._flusher is None:
            self._flusher = trailing_flusher()
        self._scheduled = True
        self._flusher.at(time.monotonic() + max(0.0, wait), self)

    def flush_due(self) -> None:
        """The flusher's look: write what a burst left buffered once its interval is up (the trailing edge)."""
        with self._cv:
            self._scheduled = False
            if self._closed or not self._pending:
                return  # closed, or a write of the unit's own took it all since it asked
            wait = self._last_flush + FLUSH_SECONDS - self._clock()
            if wait > 0:  # a write of the unit's own came since it asked, and more text after it
                self._schedule(wait)
                return
        try:
            self._fence.commit(Batch())
        except (LeaseLost, redis.RedisError) as err:
            # The execution's own next write meets the same error and settles accordingly.
            log.debug("live text not written: %s", err)


def _marks(raw: Mapping[bytes | str, bytes | str]) -> dict[str, dict[str, int]]:
    return {(k.decode() if isinstance(k, bytes) else k): json.loads(v) for k, v in raw.items()}
