"""The sender's trace context in a Celery message: W3C `traceparent` (and `tracestate`) as message headers.

The publisher adds them to the unit's message; a worker attaches them as the current context while the task runs
(tasks/telemetry/celery_signals.py), so the unit's first execution is a child of whatever sent it (a web request).
Baton carries them itself rather than with `opentelemetry-instrumentation-celery` (README: Traces and metrics).
"""

from __future__ import annotations

from typing import Any

from tasks.telemetry import switch

HEADERS = ("traceparent", "tracestate")


def headers() -> dict[str, str]:
    """The current context's headers for a message being published (none when this process does not trace, or
    has no current span)."""
    if not switch.on():
        return {}
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {name: carrier[name] for name in HEADERS if name in carrier}


def attach(request: Any) -> object | None:
    """Make the context a task's message carries current (returns the token to detach; None: nothing carried)."""
    if not switch.on():
        return None
    carrier = {name: value for name in HEADERS if isinstance(value := getattr(request, name, None), str)}
    if "traceparent" not in carrier:
        return None
    from opentelemetry import context, propagate

    return context.attach(propagate.extract(carrier))


def detach(token: object | None) -> None:
    if token is None:
        return
    from opentelemetry import context

    context.detach(token)  # type: ignore[arg-type]
