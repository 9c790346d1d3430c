"""Loopback `Host` headers, and the guard `baton serve` puts in front of a token-less API.

Without a token the API trusts whoever reaches it, which `baton serve` allows only on loopback. A web page
can still reach loopback through DNS rebinding (its own name re-resolved to 127.0.0.1, so the browser
treats the API as same-origin); such requests carry that foreign name in `Host`. So without a token only a
loopback `Host` is served.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from config.hosts import is_loopback


def host_of(header: str) -> str:
    """The host part of a `Host` header: `[::1]:8000` -> `::1`, `localhost:80` -> `localhost`."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class LoopbackHostOnly:
    """ASGI middleware: 400 for a request whose `Host` is not a loopback name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not is_loopback(host_of(Headers(scope=scope).get("host", ""))):
            detail = "this API has no token, so it answers only to a loopback Host; set BATON_API_TOKEN to serve it"
            await JSONResponse({"detail": detail}, status_code=400)(scope, receive, send)
            return
        await self.app(scope, receive, send)
