"""What endpoints are handed: the app's client and settings, passed in by `create_app`, never imported globals."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from config.settings import Settings
from tasks.client import AsyncClient


def client(request: Request) -> AsyncClient:
    """The app's `tasks.client.AsyncClient` (endpoints are `async def`s that await it on the server's loop)."""
    found: AsyncClient = request.app.state.client  # Starlette's state is untyped; create_app puts one there
    return found


def settings(request: Request) -> Settings:
    """The settings the app was built with."""
    found: Settings = request.app.state.settings
    return found


ClientDep = Annotated[AsyncClient, Depends(client)]
