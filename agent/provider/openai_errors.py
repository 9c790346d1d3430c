"""The `openai` SDK's exceptions mapped to Baton's failure classes (registered with `agent.loop.failures.classify`).

401/403 `provider_auth`; 429 `provider_rate_limited` (its `retry-after` honoured); 503, or an error whose type
or message says overloaded, `provider_overloaded`; 500/502/504 and other 5xx `provider_server_error`; a 400
saying the context length was exceeded (code `context_length_exceeded`, "maximum context length is N tokens.
However, your messages resulted in M tokens") `context_overflow`, which the loop compacts once; other 4xx
`provider_bad_request`. An error sent inside the stream (no status) is a server error unless it says overloaded
or rate limited. A timeout is a stall, a connection error transient.
"""

from __future__ import annotations

import re
from typing import Any

import openai

from agent.loop.failures import Classified, FailureClass, Overflow, register_classifier, retry_after_seconds
from agent.provider import transport

_MAXIMUM = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_RESULTED = re.compile(r"(?:resulted in|requested) (\d+) tokens", re.IGNORECASE)
_OVERFLOW_WORDS = ("maximum context length", "context_length_exceeded", "context length exceeded")


def overflow_in(code: str | None, message: str) -> Overflow | None:
    """The overflow a context-length error reports (its figures when it states them), else None."""
    text = message or ""
    if code != "context_length_exceeded" and not any(w in text.lower() for w in _OVERFLOW_WORDS):
        return None
    maximum, resulted = _MAXIMUM.search(text), _RESULTED.search(text)
    return Overflow(int(resulted.group(1)) if resulted else None, int(maximum.group(1)) if maximum else None)


def _overloaded(kind: str | None, code: str | None, message: str) -> bool:
    return any("overload" in (x or "").lower() for x in (kind, code, message))


def status_class(status: int, kind: str | None, code: str | None, message: str) -> FailureClass:
    if status in (400, 413) and overflow_in(code, message) is not None:
        return FailureClass.CONTEXT_OVERFLOW
    if status == 503 or (status >= 500 and _overloaded(kind, code, message)) or status == 529:
        return FailureClass.PROVIDER_OVERLOADED
    if status == 429:
        # OpenAI answers a spent quota with 429 too; retrying cannot refill it.
        return FailureClass.BUDGET_EXCEEDED if code == "insufficient_quota" else FailureClass.PROVIDER_RATE_LIMITED
    if status in (401, 403):
        return FailureClass.PROVIDER_AUTH
    if status in (408, 409):
        return FailureClass.INFRA_TRANSIENT
    if status >= 500:
        return FailureClass.PROVIDER_SERVER_ERROR
    if 400 <= status < 500:
        return FailureClass.PROVIDER_BAD_REQUEST
    return FailureClass.UNKNOWN


def _field(err: Any, name: str) -> str | None:
    """`message`, `type` or `code` of the error object in the body (the SDK keeps the inner object), else the
    exception's attribute of that name."""
    body = err.body
    inner = body.get("error", body) if isinstance(body, dict) else None
    found = inner.get(name) if isinstance(inner, dict) else None
    if isinstance(found, str):
        return found
    value = getattr(err, name, None)
    return value if isinstance(value, str) else None


def classify_openai(exc: BaseException) -> Classified | None:
    if isinstance(exc, openai.APITimeoutError):
        return Classified(FailureClass.PROVIDER_STALL)
    if isinstance(exc, openai.APIConnectionError):
        return Classified(FailureClass.INFRA_TRANSIENT)
    if isinstance(exc, openai.APIStatusError):
        message = _field(exc, "message") or str(exc)
        code = _field(exc, "code")
        failure_class = status_class(exc.status_code, _field(exc, "type"), code, message)
        retry_after = retry_after_seconds(exc.response.headers.get("retry-after"))
        overflow = overflow_in(code, message) if failure_class is FailureClass.CONTEXT_OVERFLOW else None
        return Classified(failure_class, retry_after, overflow)
    if isinstance(exc, openai.APIError):  # an error event inside a stream that had begun: no status
        kind, code, message = _field(exc, "type"), _field(exc, "code"), exc.message
        if _overloaded(kind, code, message):
            return Classified(FailureClass.PROVIDER_OVERLOADED)
        if "rate_limit" in f"{kind} {code}":
            return Classified(FailureClass.PROVIDER_RATE_LIMITED)
        return Classified(FailureClass.PROVIDER_SERVER_ERROR)
    return None


register_classifier(classify_openai)
register_classifier(transport.classify_transport)
