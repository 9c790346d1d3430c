"""A tool that says what of OpenTelemetry the worker process running it has set up.

Loaded by workers through `BATON_TOOLS=tests.support.otel_probe:TOOLS` (with the counting tools), so a test can
ask a real worker, in the process that runs units (a prefork child), whether tracing was set up there. (redis-py 8
imports `opentelemetry.sdk.metrics` whenever the SDK is installed, and sets nothing up: that module is not asked.)
"""

from __future__ import annotations

import json
import sys
import threading

from agent.tools import tool
from tests.support.counting_tools import TOOLS as COUNTING


@tool(effect="read")
def otel_state() -> str:
    """What this process has of OpenTelemetry: trace SDK and exporter modules, global providers, export threads."""
    modules = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter")))
    providers = {}
    for api, attribute in (("opentelemetry.trace", "_TRACER_PROVIDER"), ("opentelemetry.metrics._internal",
                                                                          "_METER_PROVIDER")):
        module = sys.modules.get(api)
        found = getattr(module, attribute, None) if module is not None else None
        providers[api] = type(found).__name__ if found is not None else None
    threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("Otel"))  # the SDK names its own
    return json.dumps({"modules": modules, "providers": providers, "threads": threads})


TOOLS = [*COUNTING, otel_state]
