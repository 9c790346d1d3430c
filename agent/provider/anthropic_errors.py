"""The Anthropic SDK's exceptions mapped to Baton's failure classes (registered with `agent.loop.failures.classify`).

Imported by the Anthropic provider, so a worker that runs it classifies what it raises; the status and the
body's `error.type` decide, and a 400 or 413 saying "prompt is too long" is a context overflow.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic

from agent.loop.failures import Classified, FailureClass, Overflow, register_classifier, retry_after_seconds
from agent.provider import transport

# The API's words for a request past the model's window: "prompt is too long: 210000 tokens > 200000 maximum".
_TOO_LONG = re.compile(r"prompt is too long(?::\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum)?", re.IGNORECASE)


def overflow_in(message: str) -> Overflow | None:
    """The overflow an Anthropic error message reports, or None when it is about something else."""
    found = _TOO_LONG.search(message or "")
    if found is None:
        return None
    tokens, maximum = found.groups()
    return Overflow(int(tokens) if tokens else None, int(maximum) if maximum else None)


def status_class(status: int, error_type: str | None, message: str = "") -> FailureClass:
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


def classify_anthropic(exc: BaseException) -> Classified | None:
    if isinstance(exc, anthropic.APITimeoutError):
        return Classified(FailureClass.PROVIDER_STALL)
    if isinstance(exc, anthropic.APIStatusError):
        retry_after = retry_after_seconds(exc.response.headers.get("retry-after"))
        message = _error_message(exc)
        failure_class = status_class(exc.status_code, _error_type(exc), message)
        overflow = overflow_in(message) if failure_class is FailureClass.CONTEXT_OVERFLOW else None
        return Classified(failure_class, retry_after, overflow)
    if isinstance(exc, anthropic.APIConnectionError):
        return Classified(FailureClass.INFRA_TRANSIENT)
    return None


register_classifier(classify_anthropic)
register_classifier(transport.classify_transport)
