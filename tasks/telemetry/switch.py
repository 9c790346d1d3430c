"""Whether this process traces: the standard `OTEL_*` variables decide, read once, with no OpenTelemetry import.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-only `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or
`OTEL_TRACES_EXPORTER` is set, and always off with `OTEL_SDK_DISABLED=true`: a worker started without them
creates no tracer, meter, exporter or thread, and never imports the SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ASKING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")


def wanted(env: Mapping[str, str]) -> bool:
    """Whether `env` asks for traces (and does not disable the SDK)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ASKING)


_on = [False]


def on() -> bool:
    """Whether this process set the SDK up (and so records spans)."""
    return _on[0]


def configure(service: str) -> bool:
    """Set the SDK up in this process when the environment asks (once; after a fork, in the child): the
    tracer and meter providers, their exporters, Baton's GenAI telemetry installed in the core. Returns `on()`."""
    if _on[0] or not wanted(os.environ):
        return _on[0]
    from tasks.telemetry import sdk  # the only way in to the SDK

    sdk.setup(service)
    _on[0] = True
    return True


def shutdown() -> None:
    """Flush and stop this process's exporters (a prefork child as it exits; a worker or server as it stops)."""
    if not _on[0]:
        return
    from tasks.telemetry import sdk

    sdk.teardown()
    _on[0] = False
