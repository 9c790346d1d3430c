"""The OpenTelemetry SDK, set up from the standard `OTEL_*` variables (imported only by `switch.configure`).

Exporters speak OTLP over HTTP (protobuf): gRPC's channels do not survive a fork, and a prefork child sets its
SDK up after its fork anyway (`worker_process_init`). Spans go out in batches on the SDK's own thread; metrics
every `OTEL_METRIC_EXPORT_INTERVAL` ms (the SDK's default, 60 s). Endpoint, headers, timeout, compression, sampler
and resource come from the SDK's own reading of the variables: Baton adds only the default service name.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from agent import telemetry as core
from tasks.telemetry.genai import GenAiTelemetry
from tasks.telemetry.instruments import Instruments
from tasks.telemetry.offload import OFFLOAD

log = logging.getLogger("baton.telemetry")


@dataclass
class _Providers:
    traces: TracerProvider
    meters: MeterProvider


_made: list[_Providers] = []


def exporters(variable: str, default: str) -> list[str]:
    """The exporters `variable` names (comma-separated, as the SDK's own `OTEL_*_EXPORTER`)."""
    return [name.strip() for name in os.environ.get(variable, default).split(",") if name.strip()]


def setup(service: str) -> None:
    """Tracer and meter providers with their exporters, made global, and Baton's telemetry installed."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: Baton exports OTLP over HTTP (http/protobuf) only", protocol)
    # The Anthropic SDK traces its own calls once a tracer provider is registered: a span per call beside Baton's
    # `chat` span per attempt, doubling them (README: Traces and metrics). Off unless the operator says otherwise.
    os.environ.setdefault("ANTHROPIC_OPEN_TELEMETRY", "false")
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    resource = Resource.create(attributes)
    traces = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    for name in exporters("OTEL_TRACES_EXPORTER", "otlp"):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            traces.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            traces.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name != "none":
            log.warning("OTEL_TRACES_EXPORTER: unknown exporter %r ignored (otlp, console, none)", name)
    readers: list[MetricReader] = []
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    has_endpoint = any(os.environ.get(v) for v in endpoints)
    for name in exporters("OTEL_METRICS_EXPORTER", "otlp" if has_endpoint else "none"):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        elif name != "none":
            log.warning("OTEL_METRICS_EXPORTER: unknown exporter %r ignored (otlp, console, none)", name)
    meters = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(traces)
    metrics.set_meter_provider(meters)
    _made.append(_Providers(traces, meters))
    core.install(GenAiTelemetry(traces.get_tracer("baton"), Instruments(meters.get_meter("baton"))))


def teardown() -> None:
    """Flush what is batched and stop the exporters (spans first: metrics may count what they carry)."""
    core.uninstall()
    OFFLOAD.flush()  # the spans and measurements made off the units' threads, before the exporters' last batch
    while _made:
        made = _made.pop()
        made.traces.shutdown()
        made.meters.shutdown()
