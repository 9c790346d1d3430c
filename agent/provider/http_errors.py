"""The transport's own failures, shared by the providers whose SDKs speak HTTP through `httpx2`.

A read timeout is a stall (the SDK's read timeout is the idle timeout); any other transport error (a refused or
reset connection, a body cut mid-chunk) is transient. Each provider's error module that
uses `httpx2` registers it.
"""

from __future__ import annotations

import httpx2

from agent.failures import Classified, FailureClass


def classify_transport(exc: BaseException) -> Classified | None:
    if isinstance(exc, httpx2.ReadTimeout):
        return Classified(FailureClass.PROVIDER_STALL)
    if isinstance(exc, httpx2.TransportError):
        return Classified(FailureClass.INFRA_TRANSIENT)
    return None

