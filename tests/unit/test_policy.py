"""The failure-policy table and the pure decisions built on it (replay, resume, backoff, interruptions)."""

from __future__ import annotations

import pytest

from agent.loop.failures import FailureClass
from agent.loop.policy import (
    MAX_REPLICATION_WAITS,
    TABLE,
    Backoff,
    Driver,
    after_failure,
    after_interruption,
    after_unconfirmed,
    compute_backoff,
    missing_cells,
    policy_for,
    should_replay,
)

ALL_CELLS = [(driver, cls) for driver in Driver for cls in FailureClass]
RETRYABLE_TRANSIENT = {
    FailureClass.INFRA_TRANSIENT,
    FailureClass.PROVIDER_STALL,
    FailureClass.PROVIDER_OVERLOADED,
    FailureClass.PROVIDER_RATE_LIMITED,
    FailureClass.PROVIDER_SERVER_ERROR,
}


def test_table_is_total_over_drivers_and_classes():
    """Every driver x failure class pair has a policy: `missing_cells` finds none, and the table has no extras."""
    assert len(list(Driver)) == 2 and len(list(FailureClass)) == 14
    assert missing_cells(TABLE) == []
    assert set(TABLE) == set(ALL_CELLS)


@pytest.mark.parametrize(
    "removed", [(Driver.CHAT_TURN, FailureClass.UNKNOWN), (Driver.CODING_RUN, FailureClass.CANCELLED)]
)
def test_missing_cells_reports_a_removed_cell(removed):
    """The totality check can fail: a table copy without one cell is reported as missing exactly that cell."""
    partial = {cell: policy for cell, policy in TABLE.items() if cell != removed}
    assert missing_cells(partial) == [removed]


def test_missing_cells_reports_a_whole_missing_driver():
    """A driver absent from the table is reported cell by cell, for every failure class."""
    partial = {cell: policy for cell, policy in TABLE.items() if cell[0] is not Driver.CODING_RUN}
    assert missing_cells(partial) == [(Driver.CODING_RUN, cls) for cls in FailureClass]


@pytest.mark.parametrize(("driver", "cls"), ALL_CELLS)
def test_every_cell_states_a_reason(driver, cls):
    """Each cell carries a non-empty, human-readable reason."""
    assert policy_for(driver, cls).reason.strip()


@pytest.mark.parametrize(("driver", "cls"), ALL_CELLS)
def test_only_retryable_classes_replay(driver, cls):
    """A request is replayed in-request only for classes whose verdict is retryable, and never for control flow."""
    policy = policy_for(driver, cls)
    if policy.replay_in_request:
        assert policy.retryable
    assert policy.replay_in_request == (cls in RETRYABLE_TRANSIENT)
    assert should_replay(cls, 1, 4) == (cls in RETRYABLE_TRANSIENT)


def test_policy_for_accepts_strings():
    """The wire names (as stored in events) look up the same cell as the enums."""
    assert policy_for("chat_turn", "provider_auth") is TABLE[(Driver.CHAT_TURN, FailureClass.PROVIDER_AUTH)]
    with pytest.raises(ValueError):
        policy_for("chat_turn", "no_such_class")


@pytest.mark.parametrize(("attempt", "budget", "expected"), [(1, 4, True), (3, 4, True), (4, 4, False), (1, 1, False)])
def test_should_replay_stays_inside_the_budget(attempt, budget, expected):
    """`attempt` counts attempts made: the last attempt of the budget is never followed by another."""
    assert should_replay(FailureClass.PROVIDER_STALL, attempt, budget) is expected


@pytest.mark.parametrize("driver", list(Driver))
def test_after_failure_auto_resumes_once_and_only_with_a_checkpoint(driver):
    """A retryable class auto-resumes exactly once, and only when there is a round or journal to resume from."""
    cls = FailureClass.PROVIDER_OVERLOADED
    first = after_failure(driver, cls, auto_resumes_used=0, has_checkpoint=True)
    assert (first.action, first.retryable) == ("auto_resume", True)
    second = after_failure(driver, cls, auto_resumes_used=1, has_checkpoint=True)
    assert (second.action, second.retryable) == ("fail", True)
    without = after_failure(driver, cls, auto_resumes_used=0, has_checkpoint=False)
    assert (without.action, without.retryable) == ("fail", True)


@pytest.mark.parametrize("cls", [FailureClass.PROVIDER_AUTH, FailureClass.CANCELLED, FailureClass.UNKNOWN])
def test_after_failure_never_resumes_non_retryable(cls):
    """Auth, a stop, or an unknown error fails at once even with a checkpoint and no resumes used."""
    decision = after_failure(Driver.CHAT_TURN, cls, auto_resumes_used=0, has_checkpoint=True)
    assert (decision.action, decision.retryable) == ("fail", False)


NO_JITTER = Backoff(initial=0.5, factor=2.0, maximum=8.0, jitter=0.0)


def test_backoff_grows_then_caps():
    """Without jitter the wait doubles per attempt and then stays at `maximum`."""
    waits = [compute_backoff(n, NO_JITTER) for n in range(1, 9)]
    assert waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert waits[5:] == [8.0, 8.0, 8.0]


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999999, 1.0])
def test_backoff_never_exceeds_maximum_even_with_jitter(rand):
    """The cap holds after jitter: a capped wait with upward jitter still does not pass `maximum`."""
    assert compute_backoff(30, Backoff(), rand=rand) <= Backoff().maximum


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_backoff_jitter_stays_in_range(attempt):
    """Jitter moves the wait by at most +/- `jitter` of the base, and the extremes are reached."""
    backoff = Backoff(jitter=0.25)
    base = backoff.initial * backoff.factor ** (attempt - 1)
    low, mid, high = (compute_backoff(attempt, backoff, rand=r) for r in (0.0, 0.5, 1.0))
    assert low == pytest.approx(base * 0.75)
    assert mid == pytest.approx(base)
    assert high == pytest.approx(base * 1.25)
    for _ in range(200):
        assert base * 0.75 <= compute_backoff(attempt, backoff) <= base * 1.25


def test_backoff_honours_retry_after_up_to_its_cap():
    """A longer retry-after wins over the computed wait, but never beyond `retry_after_cap`."""
    backoff = Backoff(retry_after_cap=60.0)
    assert compute_backoff(1, backoff, retry_after=7.0, rand=0.5) == 7.0
    assert compute_backoff(1, backoff, retry_after=600.0, rand=0.5) == 60.0
    # A short retry-after does not shorten our own backoff.
    assert compute_backoff(4, backoff, retry_after=0.1, rand=0.5) == 4.0


def test_scale_zero_removes_waits_but_not_the_providers_retry_after():
    """The testing switch zeroes our backoff, yet a provider's retry-after stays a floor (capped)."""
    zero = Backoff(scale=0.0)
    assert compute_backoff(5, zero, rand=1.0) == 0.0
    assert compute_backoff(1, zero, retry_after=3.0, rand=1.0) == 3.0
    assert compute_backoff(1, Backoff(scale=0.0, retry_after_cap=2.0), retry_after=30.0) == 2.0


def test_after_interruption_boundary():
    """A run resumes up to and including the limit, fails one past it, and never resumes without its record."""
    at_limit = after_interruption(3, 3, has_record=True)
    assert (at_limit.resume, at_limit.attempt, at_limit.max_attempts) == (True, 3, 3)
    assert after_interruption(1, 3, has_record=True).resume
    assert not after_interruption(4, 3, has_record=True).resume
    assert not after_interruption(1, 3, has_record=False).resume
    assert not after_interruption(1, 0, has_record=True).resume


def test_a_write_waiting_for_the_stores_replica_resumes_up_to_the_limit_then_fails():
    """An unconfirmed write-ahead entry waits and resumes up to and including the limit, fails one past it."""
    assert after_unconfirmed(1).resume and after_unconfirmed(MAX_REPLICATION_WAITS).resume
    past = after_unconfirmed(MAX_REPLICATION_WAITS + 1)
    assert (past.resume, past.attempt, past.max_attempts) == (False, MAX_REPLICATION_WAITS + 1, MAX_REPLICATION_WAITS)
    # With the default backoff and the 2 s WAIT, the waits outlast Redis's default repl-timeout (60 s), after which
    # a master drops a replica that stopped acknowledging (and the write goes ahead with none to wait for).
    waited = sum(compute_backoff(n, Backoff(), rand=0.0) + 2.0 for n in range(1, MAX_REPLICATION_WAITS + 1))
    assert 60 < waited < 120
    # And the class it fails as is retryable for both drivers: the owner may try again.
    assert all(policy_for(driver, FailureClass.INFRA_TRANSIENT).retryable for driver in Driver)
