"""What a loop step needs from outside: the `Edge` that journals steps and publishes events, the config, and
the loop's own failure (here so the model step and the tool round can raise it without importing the loop).

`tasks` implements the Edge on Redis (the journal); unit tests use an in-memory one (agent/loop/memory_edge.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent.errors import BatonError
from agent.history.context import DEFAULT_CONTEXT_TOKENS
from agent.loop.failures import FailureClass
from agent.loop.policy import Backoff, Driver
from agent.provider.price import Price

EventDraft = tuple[str, dict[str, Any]]


class Edge(Protocol):
    """Where the loop's steps are journaled and its events published (Redis in `tasks`)."""

    def recorded(self, step_id: str) -> dict[str, Any] | None:
        """The journaled record of a step, if any."""
        ...

    def record(
        self, step_id: str, record: dict[str, Any], events: list[EventDraft], *, last: bool = False,
        reads_next: bool = False, writes_next: bool = False,
    ) -> None:
        """Journal one step and publish its events in one write.

        `last`: the loop's last step (what follows is the unit's settle, with no I/O between): the edge may make
        it part of the settle's write instead of a write of its own. A crash before that write then loses the
        step as a crash before the step's own write would have.

        `reads_next`: the round's first call is a read tool that waits for no approval: the edge may let the round
        start once the write is sent, before it is confirmed, and confirm it before its next write, which comes
        before any write tool runs (its write-ahead entry, or an approval's request) and before the next model call
        is sent. `writes_next`: the round's first call is a write tool that waits for no approval, so the next write
        is its write-ahead entry, made before anything runs: the edge may make the step part of that write (a crash
        before it re-asks the model, as one before the step's own write).
        """
        ...

    def round_done(self) -> None:
        """A round of tools ended, every result recorded; the next model step follows. The edge may start now what
        that step's call needs before it is sent (its preflight), and finish it when the call asks."""
        ...

    def keep_files(self, files: Mapping[str, bytes]) -> None:
        """Store files (SHA-256 -> bytes) beside the unit's owner, where its requests read them (a tool's images),
        before the step that refers to them is journaled."""
        ...

    def emit(self, events: list[EventDraft]) -> None:
        """Publish events now (live progress that must not wait for the next step)."""
        ...

    def decision(self, tool_use_id: str) -> dict[str, Any] | None:
        """A person's decision on a call that waits for approval: {"decision": "approved"|"denied", "reason"}."""
        ...


class LoopFailure(BatonError):
    """The loop itself ended the turn (round ceiling, step or time budget, context budget)."""

    def __init__(self, message: str, failure_class: FailureClass) -> None:
        super().__init__(message)
        self.failure_class = failure_class


@dataclass(frozen=True)
class LoopConfig:
    owner_id: str
    turn_id: str
    driver: Driver
    model: str
    max_rounds: int
    retry_budget: int
    backoff: Backoff
    system: str | None = None
    deadline: float | None = None  # time.monotonic() value after which a run stops with budget_exceeded
    stop_grace: float = 1.0  # how long a stop lets a running tool finish before abandoning it
    drain_grace: float = 2.0  # how long a drain lets a running tool settle
    # Message ids start with this (default: the turn id). A fresh start of a unit (not a resume) uses a new
    # prefix, so its steps never share an id, and so live text, with steps of an earlier, failed generation.
    message_prefix: str | None = None
    prompt_cache: bool = True  # send cache_control breakpoints (agent/history/caching.py)
    max_tokens: int = 4096  # the agent's model settings, sent as given
    temperature: float | None = None
    thinking: str | int | None = None  # the agent's thinking: "low"/"medium"/"high", a number of tokens, or off
    context_tokens: int = DEFAULT_CONTEXT_TOKENS  # what one request may carry (agent/history/context.py)
    price: Price | None = None  # the agent's: usage carries `cost_usd` (agent/provider/price.py); None: no cost
