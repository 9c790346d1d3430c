"""What endpoints are handed: the app's client and settings, passed in by `create_app`, never imported globals."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from config.settings import Settings
from tasks.client import Client


def client(request: Request) -> Client:
    """The sync `tasks.client.Client` (endpoints that use it are sync `def`s, run in the threadpool)."""
    found: Client = request.app.state.client  # Starlette's state is untyped; create_app puts a Client there
    return found


def settings(request: Request) -> Settings:
    """The settings the app was built with."""
    found: Settings = request.app.state.settings
    return found


ClientDep = Annotated[Client, Depends(client)]
