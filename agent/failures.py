"""Failure classes and the one classifier that knows the provider's exceptions."""

from __future__ import annotations

import email.utils
import re
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

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
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Classified:
    """What a failure is, and how long the provider asked us to wait (seconds), if it did."""

    failure_class: FailureClass
    retry_after: float | None = None


# The API's words for a request past the model's window: "prompt is too long: 210000 tokens > 200000 maximum".
_TOO_LONG = re.compile(r"prompt is too long(?::\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum)?", re.IGNORECASE)


@dataclass(frozen=True)
class Overflow:
    """What a "prompt is too long" answer said: the request's size and the window, when it gave them."""

    tokens: int | None
    maximum: int | None


def overflow_in(message: str) -> Overflow | None:
    """The overflow a provider error message reports, or None when it is about something else."""
    found = _TOO_LONG.search(message or "")
    if found is None:
        return None
    tokens, maximum = found.groups()
    return Overflow(int(tokens) if tokens else None, int(maximum) if maximum else None)


class IncompleteStream(Exception):
    """The stream ended cleanly but without `message_stop`: the answer is partial."""


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


def _status_class(status: int, error_type: str | None, message: str = "") -> FailureClass:
    if status in (400, 413) and overflow_in(message) is not None:
        return FailureClass.CONTEXT_OVERFLOW
    if error_type == "overloaded_error" or status == 529:
        return FailureClass.PROVIDER_OVERLOADED
    if error_type == "rate_limit_error" or status == 429:
        return FailureClass.PROVIDER_RATE_LIMITED
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return FailureClass.PROVIDER_AUTH
    if status == 402 or error_type == "billing_error":
        return FailureClass.BUDGET_EXCEEDED
    if status in (408, 409):
        return FailureClass.INFRA_TRANSIENT
    if status >= 500 or error_type in ("api_error",):
        return FailureClass.PROVIDER_SERVER_ERROR
    if 400 <= status < 500:
        return FailureClass.PROVIDER_BAD_REQUEST
    return FailureClass.UNKNOWN


def _error_type(err: Any) -> str | None:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        kind = inner.get("type") if isinstance(inner, dict) else None
        if isinstance(kind, str):
            return kind
    return getattr(err, "type", None) if isinstance(getattr(err, "type", None), str) else None


def _error_message(err: Any) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(text, str):
            return text
    return str(getattr(err, "message", "") or "")


def _classify_one(exc: BaseException) -> Classified | None:
    # Imported here so that the enum and policy (read by every CLI call) do not pay for the SDK's import.
    import anthropic
    import httpx2

    if isinstance(exc, BatonError) and getattr(exc, "failure_class", None) is not None:
        return Classified(FailureClass(exc.failure_class))  # its own declaration (agent/errors.py)
    if isinstance(exc, Cancelled):
        return Classified(FailureClass.CANCELLED)
    if isinstance(exc, StreamStalled | httpx2.ReadTimeout | anthropic.APITimeoutError):
        return Classified(FailureClass.PROVIDER_STALL)
    if isinstance(exc, anthropic.APIStatusError):
        retry_after = retry_after_seconds(exc.response.headers.get("retry-after"))
        failure_class = _status_class(exc.status_code, _error_type(exc), _error_message(exc))
        return Classified(failure_class, retry_after)
    if isinstance(
        exc,
        IncompleteStream | anthropic.APIConnectionError | httpx2.TransportError | ConnectionError,
    ):
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
