"""Whose chat is it: the app's `authorize(request, kind, id)`, asked once for every request that names a chat or run.

A route names what it touches by its path parameters, and that is the whole declaration: `{chat_id}` names a
chat, `{run_id}` a run (NAMED_BY). One dependency on every /api router reads them, so a route added later
with either parameter is covered without a line of its own; the one route whose id is not in its path,
`POST /api/runs`, draws the new id first and asks through the same `authorize_or_hide`.

A refusal is the 404 an unknown id gets on that route, word for word (the clients' own NotFound, built in
tasks/client/core.py), and it is answered whether or not the id exists: a caller learns nothing by probing ids.
On the routes where a chat "exists as soon as it is named" (messages, retry, stop, transcript, stream), an
unknown chat is not a 404 at all; a refused one answers `no chat ID` there.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from tasks.client import core
from tasks.client.core import NotFound
from web.ids import check_id

log = logging.getLogger("baton.web")

Kind = Literal["chat", "run"]
Authorize = Callable[[Request, str, str], "bool | Awaitable[bool]"]
User = Callable[[Request], "str | Awaitable[str | None] | None"]

NAMED_BY: dict[str, Kind] = {"chat_id": "chat", "run_id": "run"}


def named(params: Mapping[str, str]) -> tuple[Kind, str] | None:
    """The chat or run a route's path parameters name, or None when they name neither."""
    for param, kind in NAMED_BY.items():
        if param in params:
            return kind, params[param]
    return None


def unknown(kind: Kind, params: Mapping[str, str]) -> NotFound:
    """What this route answers for an unknown id (so also for a refused one)."""
    if kind == "run":
        return core.no_run(params["run_id"])  # every run route reads the run's status first
    chat_id = params["chat_id"]
    if "turn_id" in params:
        return core.no_turn(chat_id, params["turn_id"])
    if "sha256" in params:
        return core.no_file(chat_id, params["sha256"])
    if "tool_use_id" in params:
        return core.no_waiting_call(chat_id, params["tool_use_id"])
    return NotFound(f"no chat {chat_id}")


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` as FastAPI calls a dependency: an `async def` awaited on the loop, a plain function in the
    threadpool (it may well query a database, and the loop also serves every open stream)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
        return await fn(*args)
    out = await run_in_threadpool(fn, *args)
    return await out if inspect.isawaitable(out) else out


async def authorize_or_hide(request: Request, kind: Kind, ident: str, hidden: NotFound) -> None:
    """Ask the app's `authorize`, if it gave one; anything but True raises `hidden` (a 404). What it raises
    itself (say an HTTPException(401) for a caller who is not logged in) goes out as it is."""
    authorize: Authorize | None = request.app.state.authorize
    if authorize is None:
        return
    allowed = await call(authorize, request, kind, ident)
    if allowed is not True:
        if not isinstance(allowed, bool):
            log.warning("authorize returned %s, not a bool: refused", type(allowed).__name__)
        raise hidden


async def allows(request: Request, kind: Kind, ident: str) -> bool:
    """Whether the app's `authorize` (if any) allows `ident`, for routes that answer a refusal otherwise than 404."""
    authorize: Authorize | None = request.app.state.authorize
    return authorize is None or await call(authorize, request, kind, ident) is True


async def authorized(request: Request) -> None:
    """The dependency on every /api route (after the token's): a malformed id is a 422 first (it names
    nothing, and says so whoever asks), then a chat or run the app does not authorize is its route's unknown-id 404."""
    params = request.path_params
    found = named(params)
    if found is None:
        return
    for param, value in params.items():
        if param.endswith("_id"):
            check_id(value, param)
    kind, ident = found
    await authorize_or_hide(request, kind, ident, unknown(kind, params))


async def who(request: Request, claimed: str | None) -> str | None:
    """Who decides an approval: the app's `user(request)` when it gave one (then what the body claims is not
    asked), else the body's `by`."""
    user: User | None = request.app.state.user
    if user is None:
        return claimed
    name: str | None = await call(user, request)
    return name
