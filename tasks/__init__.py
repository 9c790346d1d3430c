"""The Celery edge: the app, one module per driver, the drain, the client API and the CLI.

`celery -A tasks worker` finds the app here. It is loaded on first access, so that importing
`tasks.client` (a web app, every CLI call) does not build the worker's app and its drivers.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from tasks.app import app

        return app
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
