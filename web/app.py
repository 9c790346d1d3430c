"""The ASGI app: `create_app()` builds it (what `baton serve` runs, and what an existing app mounts).

from fastapi import FastAPI
from web.app import create_app

app = FastAPI()
app.mount("/baton", create_app(authorize=my_rule))   # optional: who may see which chat or run
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from config.settings import Settings, load_settings
from tasks.client import AsyncClient
from tasks.reach import STORE_ERRORS
from tasks.telemetry import switch
from web import (
    access,
    errors,
    routes_approvals,
    routes_chats,
    routes_kept,
    routes_runs,
    routes_uichat,
    routes_uihistory,
)
from web.auth import require_token
from web.hosts import LoopbackHostOnly

STATIC = Path(__file__).with_name("static")
HEALTH_TIMEOUT = 2.0
log = logging.getLogger("baton.web")


def create_app(
    settings: Settings | None = None,
    client: AsyncClient | None = None,
    *,
    authorize: access.Authorize | None = None,
    user: access.User | None = None,
) -> FastAPI:
    """The HTTP API and the chat page. Pass `settings`/`client` to share yours; by default both come
    from the environment. A client passed in stays yours to close; one made here is closed at shutdown.

    `authorize(request, kind, id) -> bool` (sync or async; `kind` "chat" or "run") is asked for every request
    that names a chat or run, after the token check; anything but True answers the 404 an unknown id gets
    (web/access.py). `user(request) -> str | None` names who decides approvals made through the API (the
    body's `by` is then not asked). A plain function is called in the threadpool, an `async def` on the loop.

    Endpoints await the `AsyncClient` on the server's loop (no threadpool); its store pool, as large as
    `BATON_API_REDIS_CONNECTIONS`, also serves the streams (a blocked XREAD holds one connection).
    """
    settings = settings or load_settings()
    owns_client = client is None
    # Made here rather than in the lifespan: a parent app that mounts this one does not run its lifespan,
    # and redis.asyncio connects lazily, on the first read, inside whichever loop serves it.
    client = client or AsyncClient(settings, client_name="baton-web")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        with contextlib.suppress(*STORE_ERRORS):  # a store down at start is met, and said, by the first request
            await client.learn_slots()  # before the streams read through `client.redis` (see learn_slots)
        try:
            yield
        finally:
            if owns_client:
                await client.aclose()

    # The schema and its docs page sit outside /api: the token rule covers every /api path, and they hold no data.
    app = FastAPI(title="Baton", lifespan=lifespan, docs_url="/docs", openapi_url="/openapi.json")
    app.state.settings = settings
    app.state.client = client
    app.state.stream_redis = client.redis
    app.state.authorize = authorize
    app.state.user = user
    errors.install(app)

    # In this order: FastAPI solves a route's dependencies in order, and a refusal must not answer before the token.
    api = [Depends(require_token), Depends(access.authorized)]
    routers = (routes_kept, routes_chats, routes_runs, routes_approvals, routes_uichat, routes_uihistory)
    for router in (module.router for module in routers):
        app.include_router(router, dependencies=api)
    # Last: any other /api path is a 404, but only for a caller with the token (the rule covers every /api request).
    app.add_api_route(
        "/api/{rest:path}",
        no_such_path,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        dependencies=api,
        include_in_schema=False,
    )
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/", page, methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def serve_app() -> ASGIApp:
    """What `baton serve` runs (a uvicorn factory): `create_app()` from the environment, and without a
    token, only for requests whose Host is a loopback name (see web/hosts.py: DNS rebinding)."""
    app = create_app()
    # Everything imported and built so far lives as long as the server: a full garbage collection would walk it
    # all again and again with the loop held (the async client's test measured 30-42 ms worst stalls with this
    # heap frozen against 60-80 ms in a process of 90,000 objects). Frozen, collections walk only what requests make.
    gc.collect()
    gc.freeze()
    # When the `OTEL_*` variables ask for traces: FastAPI's own telemetry then makes each request's server span,
    # continuing the caller's `traceparent`, and a message the request sends carries that span into its unit.
    switch.configure("baton-serve")
    return app if app.state.settings.api_token is not None else LoopbackHostOnly(app)


async def no_such_path(rest: str) -> JSONResponse:
    return JSONResponse({"detail": f"no such path: /api/{rest}"}, status_code=404)


async def healthz(request: Request) -> JSONResponse:
    """200 when Redis answers a PING within two seconds, else 503. Open without the token."""
    store: aioredis.Redis = request.app.state.stream_redis
    try:
        await asyncio.wait_for(store.ping(), HEALTH_TIMEOUT)
    except (redis.RedisError, OSError, TimeoutError) as err:
        return JSONResponse({"status": "unavailable", "redis": type(err).__name__}, status_code=503)
    return JSONResponse({"status": "ok"})


async def page(_request: Request) -> Any:
    """The chat page (`/?chat=ID`, `/?run=ID`, `&token=` when a token is set): a static file; it reads
    its parameters from its own URL."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
