"""The Celery edge: the app, one module per driver, the drain, the client API and the CLI.

`celery -A tasks worker` finds the app here.
"""

from tasks.app import app

__all__ = ["app"]
