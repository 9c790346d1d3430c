"""What endpoints are handed: the app's client and settings, passed in by `create_app`, never imported globals."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from config.settings import Settings
from tasks.client import Client


def client(request: Request) -> Client:
    """The sync `tasks.client.Client` (endpoints that use it are sync `def`s, run in the threadpool)."""
    return request.app.state.client


def settings(request: Request) -> Settings:
    return request.app.state.settings


ClientDep = Annotated[Client, Depends(client)]
