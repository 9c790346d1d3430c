"""What the providers whose SDKs speak HTTP through `httpx2` share: the transport's failures, and the abort.

A read timeout is a stall (the SDK's read timeout is the idle timeout); any other transport error (a refused or
reset connection, a body cut mid-chunk) is transient. Each provider's error module that
uses `httpx2` registers it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import ssl
from collections.abc import Mapping

import httpx2

from agent.loop.failures import Classified, FailureClass


def classify_transport(exc: BaseException) -> Classified | None:
    if isinstance(exc, httpx2.ReadTimeout):
        return Classified(FailureClass.PROVIDER_STALL)
    if isinstance(exc, httpx2.TransportError):
        return Classified(FailureClass.INFRA_TRANSIENT)
    return None


def json_body(body: Mapping[str, object]) -> bytes:
    """A request's body as the JSON the SDK's `post(content=...)` sends as it is. Given `body=` instead, the
    anthropic SDK copies the whole of it, container by container in Python, before it serializes it (a request
    carries the chat's every message: 1.6 ms for 300 of them against 0.3 ms for this; bench/RESULTS.md, stop 56).
    Text as UTF-8; a string no UTF-8 can hold (a lone surrogate, as `surrogateescape` decodes a stray byte) is
    escaped, where the SDK's encoder raised."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


@functools.cache  # two threads that race here build two contexts, no worse than before
def shared_tls() -> ssl.SSLContext:
    """The process's one TLS context for its SDK clients, the one each would build for itself (`verify=True`, the
    environment's `SSL_CERT_*` honoured). Building one loads the CA bundle, ~20 ms of CPU here, and a provider holds
    a client per shard of its streams (`shards.py`: 16 for a threads worker at -c 500), each built by the first
    stream of its shard: 0.3 s of the interpreter's CPU in the middle of a burst. A context is safe to share between
    clients and threads."""
    return httpx2.create_ssl_context()


def error_headers(err: BaseException) -> Mapping[str, str] | None:
    """The headers of the HTTP answer an SDK's status error carries (a 429's `retry-after`), if it has one."""
    headers = getattr(getattr(err, "response", None), "headers", None)
    return headers if isinstance(headers, Mapping) else None


def abort(response: httpx2.Response) -> None:
    """Unblock a read waiting on a silent socket, from another thread (a stop or a drain).

    Closing the response does not wake a thread blocked in recv(); shutting the socket down does.
    """
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()
