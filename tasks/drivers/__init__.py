"""The Celery tasks: one module per driver, and how an execution's outcome becomes a Celery action."""
