"""What a provider's answer says about its rate limits: pure parsing of the response headers, no I/O.

Anthropic sends `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}` (reset: the
RFC 3339 time of full refill); OpenAI and the servers that copy it send `x-ratelimit-{limit,remaining,reset}-{requests,
tokens}` (reset: a duration such as `6m0s` or `12ms`); a 429 carries `retry-after` (seconds, or an HTTP date) and
OpenAI's `retry-after-ms`. A limit whose remaining is 0 makes the endpoint wait for its reset; a `retry-after` makes
it wait that long. The requests a limit has left, with its reset, let the fleet count them down itself between
answers (requests already in flight have not been answered yet). Anything missing or malformed says nothing (a header
never fails a request).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from agent.loop.failures import retry_after_seconds

ANTHROPIC_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")
OPENAI_LIMITS = ("requests", "tokens")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True)
class Said:
    """The waits one answer asks for, in seconds from when it was read (None: it asked for none)."""

    retry_after: float | None = None
    exhausted: float | None = None  # until the latest reset of the limits whose remaining is 0
    exhausted_limit: str | None = None  # which limit that is (`requests`, `input-tokens`, ...), for the logs
    requests_left: int | None = None  # the requests the provider says are left until `requests_reset` (seconds)
    requests_reset: float | None = None
    requests_limit: int | None = None  # the requests a whole window holds (None: not said)

    @property
    def wait(self) -> float:
        """How long no request should go to the endpoint (0: nothing to wait for)."""
        return max(self.retry_after or 0.0, self.exhausted or 0.0)


def read_headers(headers: Mapping[str, str], *, now: float) -> Said:
    """The waits `headers` ask for; `now` is the Unix time they were read at (RFC 3339 resets are absolute)."""
    headers = _about_limits(headers)
    if not headers:  # most answers of most providers: nothing said
        return Said()
    exhausted: float | None = None
    which: str | None = None
    for name, reset in _exhausted_resets(headers, now):
        if exhausted is None or reset > exhausted:
            exhausted, which = reset, name
    left, left_reset = _requests_left(headers, now)
    limit = _remaining(headers.get("anthropic-ratelimit-requests-limit", headers.get("x-ratelimit-limit-requests")))
    return Said(retry_after(headers, now=now), exhausted, which, left, left_reset,
                int(limit) if limit is not None and left is not None else None)


def _about_limits(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that speak of rate limits, names in lower case, read in one pass: a lookup in an HTTP client's
    headers reads them all each time (an answer's twenty lookups were ~15 us of every model call)."""
    out = {}
    for name, value in headers.items():
        name = name.lower()
        if "ratelimit" in name or name.startswith("retry-after"):
            out[name] = value
    return out


def _requests_left(headers: Mapping[str, str], now: float) -> tuple[int | None, float | None]:
    """The requests left and the seconds to their reset, from either API's headers (None, None: not said)."""
    left = _remaining(headers.get("anthropic-ratelimit-requests-remaining"))
    reset: float | None
    if left is not None:
        reset = rfc3339_seconds(headers.get("anthropic-ratelimit-requests-reset"), now=now)
    else:
        left = _remaining(headers.get("x-ratelimit-remaining-requests"))
        reset = duration_seconds(headers.get("x-ratelimit-reset-requests"))
    if left is None or reset is None:
        return None, None
    return int(left), reset


def _exhausted_resets(headers: Mapping[str, str], now: float) -> list[tuple[str, float]]:
    """(limit, seconds to its reset) of every limit the headers say is at 0."""
    out = []
    for limit in ANTHROPIC_LIMITS:
        if _remaining(headers.get(f"anthropic-ratelimit-{limit}-remaining")) == 0:
            reset = rfc3339_seconds(headers.get(f"anthropic-ratelimit-{limit}-reset"), now=now)
            if reset is not None:
                out.append((limit, reset))
    for limit in OPENAI_LIMITS:
        if _remaining(headers.get(f"x-ratelimit-remaining-{limit}")) == 0:
            reset = duration_seconds(headers.get(f"x-ratelimit-reset-{limit}"))
            if reset is not None:
                out.append((limit, reset))
    return out


def _remaining(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return max(0.0, number) if number is not None and math.isfinite(number) else None


def retry_after(headers: Mapping[str, str], *, now: float) -> float | None:
    """OpenAI's `retry-after-ms`, else `retry-after` (seconds or an HTTP date), in seconds; None when absent or
    unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            seconds = float(ms) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    said = retry_after_seconds(headers.get("retry-after"), now=now)
    return said if said is None or math.isfinite(said) else None


def rfc3339_seconds(value: str | None, *, now: float) -> float | None:
    """Seconds from `now` to the RFC 3339 time `value` (0 when it is past); None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - now)


def duration_seconds(value: str | None) -> float | None:
    """A Go-style duration (`6m0s`, `1.5s`, `12ms`, `1h2m3s`) in seconds; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
