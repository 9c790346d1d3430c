"""The failure-policy table: every failure class, for every driver, mapped to what happens next.

Pure data and pure functions. Drivers (the Celery tasks) consult it; nothing here does I/O.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from agent.loop.failures import FailureClass as F


class Driver(StrEnum):
    """Every task that runs provider or tool work is one of these."""

    CHAT_TURN = "chat_turn"
    CODING_RUN = "coding_run"


@dataclass(frozen=True)
class Policy:
    """What a failure of one class means for one driver.

    retryable: the verdict shown to the owner — trying again may succeed.
    replay_in_request: the provider request is re-sent inside the shared retry budget
        (before or after partial output; never after a tool call was dispatched).
    auto_resumes: automatic task-level retries that resume from the stored round or journal
        once the request itself has failed; each costs the owner a further attempt, so it stays small.
    costs_owner: every attempt of this kind spends the owner's provider credit.
    reason: why, in one line, for people reading the table.
    """

    retryable: bool
    replay_in_request: bool
    auto_resumes: int
    costs_owner: bool
    reason: str


_BASE: dict[F, Policy] = {
    F.INFRA_TRANSIENT: Policy(True, True, 1, True, "a dropped connection or lost worker; the same request can succeed"),
    F.PROVIDER_STALL: Policy(True, True, 1, True, "the stream went silent; replaying it usually succeeds"),
    F.PROVIDER_OVERLOADED: Policy(True, True, 1, True, "the provider is overloaded; it asks callers to retry"),
    F.PROVIDER_RATE_LIMITED: Policy(True, True, 1, True, "rate limited; retry after the provider's retry-after"),
    F.PROVIDER_SERVER_ERROR: Policy(True, True, 1, True, "a 5xx from the provider is usually transient"),
    F.PROVIDER_AUTH: Policy(False, False, 0, False, "the API key is missing or refused; retrying cannot help"),
    F.PROVIDER_BAD_REQUEST: Policy(False, False, 0, False, "the provider rejected the request itself"),
    F.CONTEXT_OVERFLOW: Policy(
        False,
        False,
        0,
        False,
        "the conversation does not fit the model's window even after one compaction; re-sending it cannot help",
    ),
    F.BUDGET_EXCEEDED: Policy(False, False, 0, False, "the token, step or time budget is spent"),
    F.ROUND_CEILING: Policy(False, False, 0, False, "the turn used all its tool rounds; ask a narrower question"),
    F.TOOL_ERROR: Policy(True, False, 0, False, "a tool could not run; the owner decides whether to try again"),
    F.AGENT_UNKNOWN: Policy(
        True, False, 0, False, "no worker served its agent within BATON_AGENT_WAIT; retry once a worker serves it"
    ),
    F.CANCELLED: Policy(False, False, 0, False, "the owner stopped it; a stop is not a failure to retry"),
    F.UNKNOWN: Policy(False, False, 0, False, "an unexpected error; retrying blindly could repeat it"),
}

_OVERRIDES: dict[tuple[Driver, F], Policy] = {
    # A run is long and unattended: a lost worker or dropped link resumes it from its journal,
    # which re-runs no finished step, so one automatic resume is as cheap as for a chat turn.
    (Driver.CODING_RUN, F.BUDGET_EXCEEDED): Policy(
        False, False, 0, False, "the run used its step or wall-clock budget; start a new run to go on"
    ),
    # The loop already compacted once (agent/history/context.py) before this class is raised: a retry would rebuild
    # the same over-long request, so neither driver retries or resumes it.
    (Driver.CODING_RUN, F.CONTEXT_OVERFLOW): Policy(
        False,
        False,
        0,
        False,
        "the run's current round outgrew the context window even with old tool results elided; start a new run",
    ),
}

TABLE: dict[tuple[Driver, F], Policy] = {
    (driver, cls): _OVERRIDES.get((driver, cls), _BASE[cls]) for driver in Driver for cls in F
}


def missing_cells(table: Mapping[tuple[Driver, F], Policy]) -> list[tuple[Driver, F]]:
    """Every (driver, class) pair `table` has no policy for; empty when the table is total."""
    return [(driver, cls) for driver in Driver for cls in F if (driver, cls) not in table]


def policy_for(driver: Driver | str, failure_class: F | str) -> Policy:
    """Look a cell up; a missing cell is a programming error, not a runtime default."""
    return TABLE[(Driver(driver), F(failure_class))]


def should_replay(failure_class: F | str, attempt: int, budget: int) -> bool:
    """Re-send a failed provider request? `attempt` counts the attempts already made (1-based)."""
    return attempt < budget and _BASE[F(failure_class)].replay_in_request


@dataclass(frozen=True)
class AfterFailure:
    """What a driver does once a request (or a step) failed for good."""

    action: str  # "auto_resume" or "fail"
    retryable: bool


def after_failure(
    driver: Driver | str, failure_class: F | str, *, auto_resumes_used: int, has_checkpoint: bool
) -> AfterFailure:
    """Resume automatically only with something to resume from and allowance left; else fail."""
    policy = policy_for(driver, failure_class)
    if has_checkpoint and auto_resumes_used < policy.auto_resumes:
        return AfterFailure("auto_resume", policy.retryable)
    return AfterFailure("fail", policy.retryable)


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with jitter; `scale=0` is the testing switch that removes waits."""

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 8.0
    jitter: float = 0.25
    retry_after_cap: float = 60.0
    scale: float = 1.0


def compute_backoff(
    attempt: int,
    backoff: Backoff,
    *,
    retry_after: float | None = None,
    rand: float | None = None,
) -> float:
    """Seconds to wait before attempt `attempt + 1`; honours `retry-after` up to its cap."""
    rand = random.random() if rand is None else rand
    base = min(backoff.maximum, backoff.initial * backoff.factor ** max(0, attempt - 1))
    # Capped after jitter: `maximum` is a promise about the wait itself, not about its midpoint.
    delay = min(backoff.maximum, base * (1 + backoff.jitter * (2 * rand - 1)))
    if retry_after is not None:
        delay = max(delay, min(retry_after, backoff.retry_after_cap))
        # The provider's own wait is a floor the testing switch must not shorten below.
        return max(delay * backoff.scale, min(retry_after, backoff.retry_after_cap))
    return delay * backoff.scale


@dataclass(frozen=True)
class Interruption:
    """The verdict on a platform interruption (a drain or a lost worker)."""

    resume: bool
    attempt: int
    max_attempts: int


def after_interruption(count_after_increment: int, max_interruptions: int, *, has_record: bool) -> Interruption:
    """A run resumes while its durable interruption count stays within the limit, never blindly."""
    resume = has_record and count_after_increment <= max_interruptions
    return Interruption(resume, count_after_increment, max_interruptions)


# A write tool whose write-ahead entry the store's replicas did not confirm in time (WAIT timed out) waits, with
# the backoff, and its unit is resumed from its journal, this many times before it fails as `infra_transient`.
# Not `auto_resumes`: a wait re-runs nothing (the journal replays what ran, no provider call is repeated), so it
# costs the owner nothing but time. About a minute and a half with the default backoff and the 2 s WAIT: longer
# than Redis's default `repl-timeout` (60 s), after which a master drops a replica that stopped acknowledging,
# and the write then goes ahead with none to wait for (stated unreplicated).
MAX_REPLICATION_WAITS = 12


def after_unconfirmed(waits: int, max_waits: int = MAX_REPLICATION_WAITS) -> Interruption:
    """A write tool's entry went unconfirmed for the `waits`-th time: wait and resume, or fail past the limit."""
    return Interruption(waits <= max_waits, waits, max_waits)
