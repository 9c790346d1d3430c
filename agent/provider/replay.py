"""Stream replay: a broken attempt is discarded and the same request re-sent, inside one budget.

Attempts before and after output share the budget. Tools are dispatched only after a stream
completes, so discarding an attempt (even one holding complete tool calls) has no effect to undo.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from agent.errors import Cancelled, ProviderError
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, Overflow, classify
from agent.loop.policy import Backoff, Driver, compute_backoff, policy_for, should_replay
from agent.provider.base import Answer, AttemptFailed, Provider, ProviderRequest, TextSink, TokenUsage
from agent.telemetry import telemetry


@dataclass(frozen=True)
class RetryNotice:
    """One discarded attempt, for the `turn.retry` event and the usage record."""

    message_id: str
    attempt: int
    failure_class: FailureClass
    reason: str
    had_output: bool
    usage: TokenUsage
    delay: float


@dataclass(frozen=True)
class Outcome:
    """A completed answer and what it took: attempts, discarded attempts, tokens (discarded included)."""

    answer: Answer
    attempts: int
    discarded_attempts: int
    usage: TokenUsage


class MeteredAttempt(Protocol):
    def answered(self, usage: TokenUsage) -> None: ...


class Metering(Protocol):
    """Budgets around each attempt (agent/loop/spend.py): entering reserves, leaving settles."""

    def attempt(self) -> AbstractContextManager[MeteredAttempt]: ...


class RequestFailed(ProviderError):
    """The budget is spent or the failure is not replayable."""

    def __init__(
        self,
        message: str,
        *,
        failure_class: FailureClass,
        retryable: bool,
        attempts: int,
        usage: TokenUsage,
        overflow: Overflow | None = None,
    ) -> None:
        super().__init__(message, failure_class=failure_class, retryable=retryable)
        self.overflow = overflow  # a context_overflow: the sizes the provider stated, if it did
        self.attempts = attempts
        self.discarded_attempts = attempts
        self.usage = usage


def request_with_replay(
    provider: Provider,
    request: ProviderRequest,
    *,
    message_id: str,
    budget: int,
    backoff: Backoff,
    cancel: CancelToken,
    driver: Driver = Driver.CHAT_TURN,
    on_retry: Callable[[RetryNotice], None] | None = None,
    on_text: Callable[[int, str], None] | None = None,
    on_reasoning: Callable[[int, str], None] | None = None,
    first_attempt: int = 1,
    meter: Metering | None = None,
) -> Outcome:
    """Send `request` until one stream completes or the shared budget says stop.

    Attempts are numbered from `first_attempt` (an execution after a drain goes on from the attempts an
    earlier one made); the budget counts this execution's attempts. `on_text(attempt, text)` sees the text,
    `on_reasoning(attempt, text)` the reasoning the model streams. `meter`: each attempt is sent inside a
    reservation of the unit's budgets and settled to what it cost.
    """
    usage = TokenUsage()
    for attempt in range(1, budget + 1):
        cancel.raise_if_set()
        number = first_attempt + attempt - 1
        sinks: dict[str, TextSink] = {}
        if on_text is not None:
            sinks["on_text"] = partial(on_text, number)
        if on_reasoning is not None:
            sinks["on_reasoning"] = partial(on_reasoning, number)
        try:
            with meter.attempt() if meter is not None else nullcontext() as metered:  # refused: nothing is sent
                with telemetry().attempt(provider, request, number) as traced:  # `chat MODEL`; discarded if it raises
                    answer = traced.answered(provider.stream(request, cancel=cancel, **sinks))
                if metered is not None:
                    metered.answered(answer.usage)
        except AttemptFailed as failed:
            usage = usage + failed.usage
            found = classify(failed.cause)
            reason = str(failed)
            if not should_replay(found.failure_class, attempt, budget):
                raise RequestFailed(
                    f"{found.failure_class}: {reason}",
                    failure_class=found.failure_class,
                    retryable=policy_for(driver, found.failure_class).retryable,
                    attempts=attempt,
                    usage=usage,
                    overflow=found.overflow,
                ) from failed.cause
            delay = compute_backoff(attempt, backoff, retry_after=found.retry_after)
            if on_retry is not None:
                notice = RetryNotice(
                    message_id, number, found.failure_class, reason, failed.had_output, failed.usage, delay
                )
                on_retry(notice)
            if delay > 0:
                telemetry().waiting(str(found.failure_class), delay)
            if delay > 0 and cancel.wait(delay):
                raise Cancelled(cancel.reason or "stop") from None
            continue
        return Outcome(answer, attempt, attempt - 1, usage + answer.usage)
    raise AssertionError("unreachable: the last attempt either returns or raises")
