"""`classify` on real SDK and transport exception objects, and `retry-after` parsing."""

from __future__ import annotations

import email.utils
import time

import anthropic
import httpx2
import pytest

import agent.provider.anthropic_errors  # noqa: F401 - registers the Anthropic SDK's exceptions with classify
from agent.errors import Cancelled, ProviderError, ToolError
from agent.loop.failures import (
    FailureClass,
    IncompleteStream,
    StreamStalled,
    classify,
    retry_after_seconds,
)

URL = "http://x/v1/messages"


def _request() -> httpx2.Request:
    return httpx2.Request("POST", URL)


def _response(status: int, error_type: str | None = None, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": error_type, "message": "m"}} if error_type else {}
    return httpx2.Response(status, request=_request(), headers=headers or {}, json=body)


def _status_error(cls: type[anthropic.APIStatusError], status: int, error_type: str | None, **headers: str):
    response = _response(status, error_type, {k.replace("_", "-"): v for k, v in headers.items()})
    return cls(f"Error code: {status}", response=response, body=response.json())


@pytest.mark.parametrize(
    ("cls", "status", "error_type", "expected"),
    [
        (anthropic.RateLimitError, 429, "rate_limit_error", FailureClass.PROVIDER_RATE_LIMITED),
        (anthropic.InternalServerError, 500, "api_error", FailureClass.PROVIDER_SERVER_ERROR),
        (anthropic.InternalServerError, 503, None, FailureClass.PROVIDER_SERVER_ERROR),
        (anthropic.AuthenticationError, 401, "authentication_error", FailureClass.PROVIDER_AUTH),
        (anthropic.PermissionDeniedError, 403, "permission_error", FailureClass.PROVIDER_AUTH),
        (anthropic.BadRequestError, 400, "invalid_request_error", FailureClass.PROVIDER_BAD_REQUEST),
        (anthropic.NotFoundError, 404, "not_found_error", FailureClass.PROVIDER_BAD_REQUEST),
        (anthropic.APIStatusError, 529, "overloaded_error", FailureClass.PROVIDER_OVERLOADED),
        (anthropic.APIStatusError, 529, None, FailureClass.PROVIDER_OVERLOADED),
        (anthropic.OverloadedError, 529, "overloaded_error", FailureClass.PROVIDER_OVERLOADED),
    ],
)
def test_status_errors(cls, status, error_type, expected):
    """Each SDK status error maps to its class by status and by the body's `error.type`."""
    err = _status_error(cls, status, error_type)
    assert err.status_code == status
    found = classify(err)
    assert found.failure_class is expected
    assert found.retry_after is None


def test_in_stream_overloaded_error_with_status_200():
    """An `error` event mid-stream arrives as APIStatusError on a 200 response: the body type decides (overloaded)."""
    response = httpx2.Response(200, request=_request(), headers={"content-type": "text/event-stream"})
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    err = anthropic.APIStatusError(f"{body}", response=response, body=body)
    assert err.status_code == 200
    assert classify(err).failure_class is FailureClass.PROVIDER_OVERLOADED


def test_in_stream_api_error_with_status_200_is_a_server_error():
    """An in-stream `api_error` on a 200 response is the provider's own fault, not a bad request."""
    response = httpx2.Response(200, request=_request())
    body = {"type": "error", "error": {"type": "api_error", "message": "Internal"}}
    err = anthropic.APIStatusError(f"{body}", response=response, body=body)
    assert classify(err).failure_class is FailureClass.PROVIDER_SERVER_ERROR


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ReadTimeout("read timed out", request=_request()), FailureClass.PROVIDER_STALL),
        (anthropic.APITimeoutError(request=_request()), FailureClass.PROVIDER_STALL),
        (StreamStalled("silent"), FailureClass.PROVIDER_STALL),
        (httpx2.RemoteProtocolError("peer closed connection", request=_request()), FailureClass.INFRA_TRANSIENT),
        (httpx2.ConnectError("refused", request=_request()), FailureClass.INFRA_TRANSIENT),
        (anthropic.APIConnectionError(request=_request()), FailureClass.INFRA_TRANSIENT),
        (IncompleteStream("no message_stop"), FailureClass.INFRA_TRANSIENT),
        (ConnectionResetError(), FailureClass.INFRA_TRANSIENT),
        (ToolError("refused"), FailureClass.TOOL_ERROR),
        (Cancelled("stop"), FailureClass.CANCELLED),
        (ProviderError("x", failure_class="provider_auth", retryable=False), FailureClass.PROVIDER_AUTH),
        (RuntimeError("who knows"), FailureClass.UNKNOWN),
    ],
)
def test_transport_and_own_errors(exc, expected):
    """Timeouts are stalls, broken connections are transient, our own errors carry their class, the rest unknown."""
    assert classify(exc).failure_class is expected


def test_walks_cause_to_the_sdk_error():
    """An error raised `from` a RateLimitError is classified by that cause, with its retry-after."""
    root = _status_error(anthropic.RateLimitError, 429, "rate_limit_error", retry_after="12")
    try:
        try:
            raise root
        except anthropic.RateLimitError as err:
            raise RuntimeError("wrapped by some layer") from err
    except RuntimeError as wrapped:
        found = classify(wrapped)
    assert found.failure_class is FailureClass.PROVIDER_RATE_LIMITED
    assert found.retry_after == 12.0


def test_walks_implicit_context_and_survives_cycles():
    """An error raised while handling another is classified by the one it interrupted; a cause cycle terminates."""
    try:
        try:
            raise httpx2.ReadTimeout("slow", request=_request())
        except httpx2.ReadTimeout:
            raise ValueError("while handling")  # noqa: B904 - the implicit __context__ is the point
    except ValueError as err:
        assert classify(err).failure_class is FailureClass.PROVIDER_STALL
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert classify(a).failure_class is FailureClass.UNKNOWN


def test_retry_after_seconds_header_on_a_real_error():
    """A numeric `retry-after` on a 429 and on a 529 is read as seconds."""
    assert classify(_status_error(anthropic.RateLimitError, 429, None, retry_after="3")).retry_after == 3.0
    assert classify(_status_error(anthropic.APIStatusError, 529, None, retry_after="1.5")).retry_after == 1.5


def test_retry_after_http_date_on_a_real_error():
    """An HTTP-date `retry-after` becomes a positive number of seconds until that date."""
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    found = classify(_status_error(anthropic.RateLimitError, 429, None, retry_after=when))
    assert found.retry_after is not None
    assert 100 < found.retry_after <= 121


def test_retry_after_garbage_on_a_real_error_is_ignored():
    """A malformed `retry-after` does not break classification; it just gives no wait."""
    found = classify(_status_error(anthropic.RateLimitError, 429, None, retry_after="soon, maybe"))
    assert found.failure_class is FailureClass.PROVIDER_RATE_LIMITED
    assert found.retry_after is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5.0),
        ("0.25", 0.25),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("garbage", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_parsing(value, expected):
    """Seconds are taken as is (never negative), a date is measured from `now`, garbage is None."""
    now = email.utils.parsedate_to_datetime("Wed, 21 Oct 2015 07:28:00 GMT").timestamp()
    assert retry_after_seconds(value, now=now) == expected


# -- every exception Baton raises maps to a class: `unknown` stays for what nobody foresaw -----------------------

PROJECT_PACKAGES = ("agent", "tasks", "config")

# Not a unit's failure, so never classified: each is named with where it goes instead. Anything else the project
# defines must map to a class other than `unknown`.
NOT_A_UNITS_FAILURE = {
    "agent.errors.AwaitingApproval": "a signal: the unit parks in `waiting` for a person",
    "tasks.client.core.ValidationError": "bad input, raised to the caller before anything is enqueued",
    "tasks.client.core.NotFound": "an unknown id, raised to the caller",
    "tasks.client.core.Busy": "on_busy='reject' refused a message, raised to the caller; nothing was enqueued",
    "config.settings.SettingsError": "a bad setting stops the process at start, naming the variable",
    "agent.messages.media.FileRefused": "a file a message cannot carry, refused to the caller before any enqueue",
    "tasks.store.budget_rules.BudgetError": "a bad scope or limit, raised to the caller as its ValidationError",
}


def _project_exceptions() -> list[type[BaseException]]:
    """Every exception type defined in Baton's packages, found by importing them all and walking subclasses."""
    import importlib
    import pkgutil

    for name in PROJECT_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not module.name.endswith("__main__"):  # the CLI's entry point runs on import
                importlib.import_module(module.name)

    def walk(cls: type[BaseException]):
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    found = {cls for cls in walk(BaseException) if cls.__module__.split(".")[0] in PROJECT_PACKAGES}
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _example(cls: type[BaseException]) -> BaseException:
    """An instance of `cls`, built as the project builds one (the few with arguments beyond a message)."""
    from agent.loop.edge import LoopFailure
    from agent.loop.spend import BudgetExceeded
    from agent.provider.base import AttemptCut, AttemptFailed, TokenUsage
    from agent.provider.rate_gate import FleetWaits, RateLimited
    from agent.provider.replay import RequestFailed
    from agent.tools.round import CancelledRound
    from config.settings import Settings
    from tasks.reach import Unavailable

    if issubclass(cls, BudgetExceeded):
        return cls("budget_exceeded: the budget of all ...", scope="all")
    if issubclass(cls, RequestFailed):
        server_error = FailureClass.PROVIDER_SERVER_ERROR
        return cls("x", failure_class=server_error, retryable=True, attempts=1, usage=TokenUsage())
    if issubclass(cls, ProviderError):
        return cls("x", failure_class="provider_server_error", retryable=True)
    if issubclass(cls, LoopFailure):
        return cls("x", FailureClass.ROUND_CEILING)
    if issubclass(cls, AttemptFailed):  # a wrapper: classified by the error it wraps
        return cls(StreamStalled("silent"), TokenUsage(), had_output=False)
    if issubclass(cls, CancelledRound):
        return cls("stop", [])
    if issubclass(cls, AttemptCut):
        return cls("stop", TokenUsage())
    if issubclass(cls, Cancelled):
        return cls("stop")
    if issubclass(cls, Unavailable):
        return cls("store", Settings(), ConnectionRefusedError("refused"))
    if issubclass(cls, RateLimited):
        return cls(9.0, "requests_per_minute")
    if issubclass(cls, FleetWaits):
        return cls(RuntimeError("429"))
    return cls("x")


def test_every_exception_the_project_raises_maps_to_a_class_other_than_unknown():
    """Walks every exception type Baton defines (ReplicationUnconfirmed included): a new one that `classify` does
    not know, or that declares no `failure_class`, fails here instead of settling a unit as `unknown`."""
    from tasks.store.fenced import ReplicationUnconfirmed

    found = _project_exceptions()
    names = {f"{c.__module__}.{c.__qualname__}" for c in found}
    assert ReplicationUnconfirmed in found and set(NOT_A_UNITS_FAILURE) <= names
    unmapped = [
        name
        for cls in found
        if (name := f"{cls.__module__}.{cls.__qualname__}") not in NOT_A_UNITS_FAILURE
        and name != "agent.errors.BatonError"  # the base: each subclass declares its own
        and classify(_example(cls)).failure_class is FailureClass.UNKNOWN
    ]
    assert unmapped == []


def test_a_store_write_no_replica_confirmed_is_transient_not_unknown():
    from tasks.store.fenced import ReplicationUnconfirmed

    err = ReplicationUnconfirmed("0 of 1 replicas confirmed the write within 2000 ms")
    assert classify(err).failure_class is FailureClass.INFRA_TRANSIENT
    assert classify(RuntimeError("wrapping")).failure_class is FailureClass.UNKNOWN
    try:
        raise RuntimeError("wrapping") from err
    except RuntimeError as wrapped:
        assert classify(wrapped).failure_class is FailureClass.INFRA_TRANSIENT
