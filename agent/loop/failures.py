"""Failure classes, and `classify`: the generic rules plus the classifiers each provider registers."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from agent.errors import BatonError, Cancelled


class FailureClass(StrEnum):
    INFRA_TRANSIENT = "infra_transient"
    PROVIDER_STALL = "provider_stall"
    PROVIDER_OVERLOADED = "provider_overloaded"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_SERVER_ERROR = "provider_server_error"
    PROVIDER_AUTH = "provider_auth"
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    CONTEXT_OVERFLOW = "context_overflow"
    BUDGET_EXCEEDED = "budget_exceeded"
    ROUND_CEILING = "round_ceiling"
    TOOL_ERROR = "tool_error"
    AGENT_UNKNOWN = "agent_unknown"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Overflow:
    """What a provider's "request too long for the window" answer said: the request's size and the window,
    when it gave them (each provider's error module reads its own API's wording)."""

    tokens: int | None
    maximum: int | None


@dataclass(frozen=True)
class Classified:
    """What a failure is, how long the provider asked us to wait (seconds) if it did, and, for a
    `context_overflow`, what the provider said about the sizes."""

    failure_class: FailureClass
    retry_after: float | None = None
    overflow: Overflow | None = None


class IncompleteStream(Exception):
    """The stream ended cleanly but without its end (`message_stop`, a `finish_reason`): the answer is partial."""


class StreamStalled(Exception):
    """No stream event arrived within the idle timeout."""


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Parse a `retry-after` header: seconds, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


# A provider's own exceptions (its SDK's status errors, its transport's timeouts) are classified by its own
# module (agent/provider/*_errors.py), which registers a classifier when it is imported: a process can only hold
# such an exception after importing the provider that raised it. This module knows no SDK.
ErrorClassifier = Callable[[BaseException], "Classified | None"]
_classifiers: list[ErrorClassifier] = []


def register_classifier(classifier: ErrorClassifier) -> ErrorClassifier:
    """Add a provider's classifier (idempotent); `classify` consults each in turn after the generic rules."""
    if classifier not in _classifiers:
        _classifiers.append(classifier)
    return classifier


def _classify_one(exc: BaseException) -> Classified | None:
    if isinstance(exc, BatonError) and getattr(exc, "failure_class", None) is not None:
        return Classified(FailureClass(exc.failure_class))  # its own declaration (agent/errors.py)
    if isinstance(exc, Cancelled):
        return Classified(FailureClass.CANCELLED)
    if isinstance(exc, StreamStalled):
        return Classified(FailureClass.PROVIDER_STALL)
    for classifier in _classifiers:
        found = classifier(exc)
        if found is not None:
            return found
    if isinstance(exc, IncompleteStream | ConnectionError):
        return Classified(FailureClass.INFRA_TRANSIENT)
    return None


def classify(exc: BaseException) -> Classified:
    """Map any exception to its failure class, walking `__cause__`/`__context__` to the root."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _classify_one(current)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return Classified(FailureClass.UNKNOWN)
