"""`create_app(authorize=..., user=...)` as a web app would write it, for uvicorn in tests (`--factory`).

The rule: the user is named by the `X-User` header (a stand-in for the app's session), and may see only the
chats and runs whose id starts with `NAME-`; `admin` may see everything (so a test can read what an unknown
id answers). Approvals made through the API are by that user, whatever the body claims.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request

from web.app import create_app

ADMIN = "admin"


def _allowed(request: Request, ident: str) -> bool:
    name = request.headers.get("x-user", "")
    return name == ADMIN or (name != "" and ident.startswith(f"{name}-"))


def allow_own(request: Request, kind: str, ident: str) -> bool:
    return _allowed(request, ident)


async def allow_own_async(request: Request, kind: str, ident: str) -> bool:
    await asyncio.sleep(0)  # a real suspension, as a database lookup would make
    return _allowed(request, ident)


def signed_in(request: Request) -> str | None:
    return request.headers.get("x-user") or None


def sync_app() -> FastAPI:
    return create_app(authorize=allow_own, user=signed_in)


def async_app() -> FastAPI:
    return create_app(authorize=allow_own_async, user=signed_in)
