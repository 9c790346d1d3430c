"""A small OTLP/HTTP receiver: what a Collector would take at /v1/traces and /v1/metrics, decoded with the
protobuf messages of `opentelemetry-proto`, kept as plain records a test can read."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str, dict[str, Any]]]  # trace id, span id, attributes
    status: int
    status_message: str
    service: str
    start: int
    end: int

    def attribute_values(self) -> list[Any]:
        """Every attribute value of the span, its events' and links' (for a search through all of them)."""
        out = list(self.attributes.values())
        for _, attrs in self.events:
            out += attrs.values()
        for *_, attrs in self.links:
            out += attrs.values()
        return out


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> data points' attributes + value
    raw: list[bytes] = field(default_factory=list)  # every decoded body, for a search for a secret


class OtlpReceiver:
    def __init__(self) -> None:
        self.received = Received()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path == "/v1/traces":
                    receiver._traces(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver._metrics(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for rs in request.resource_spans:
            service = attributes(rs.resource.attributes).get("service.name", "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes=attributes(s.attributes),
                            events=[(e.name, attributes(e.attributes)) for e in s.events],
                            links=[(lk.trace_id.hex(), lk.span_id.hex(), attributes(lk.attributes)) for lk in s.links],
                            status=s.status.code,
                            status_message=s.status.message,
                            service=service,
                            start=s.start_time_unix_nano,
                            end=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.received.spans += spans
            self.received.raw.append(body)

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self._lock:
            self.received.raw.append(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        points = getattr(m, kind).data_points if kind else []
                        for p in points:
                            number = getattr(p, "count", None) if kind == "histogram" else (
                                p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                            )
                            self.received.metrics.setdefault(m.name, []).append(
                                {**attributes(p.attributes), "_value": number}
                            )

    # -- reading ---------------------------------------------------------------------------------

    def spans(self, name: str | None = None) -> list[Span]:
        with self._lock:
            found = list(self.received.spans)
        return [s for s in found if name is None or s.name == name or s.name.startswith(name + " ")]

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.1)
        return bool(predicate())

    def clear(self) -> None:
        with self._lock:
            self.received = Received()
