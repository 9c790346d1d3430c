"""Structured logs: chat/run/turn ids and attempt on every record, JSON on request, secrets redacted."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
from typing import Any

from celery import signals

context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("baton_log_context", default={})  # noqa: B039

_SECRET_PATTERNS = [re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"), re.compile(r"(://[^:/@\s]*:)[^@\s]+@")]


def _secrets() -> list[str]:
    names = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    return [v for n in names if len(v := os.environ.get(n, "")) >= 6]


def redact(text: str) -> str:
    for secret in _secrets():
        text = text.replace(secret, "[redacted]")
    text = _SECRET_PATTERNS[0].sub("[redacted]", text)
    return _SECRET_PATTERNS[1].sub(r"\1[redacted]@", text)


class ContextFilter(logging.Filter):
    """Adds the executing unit's ids to every record and redacts secrets from the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in context.get().items():
            setattr(record, key, value)
        if record.args:
            try:
                record.msg = record.getMessage()
                record.args = None
            except (TypeError, ValueError):
                pass
        record.msg = redact(str(record.msg))
        return True


class JsonFormatter(logging.Formatter):
    FIELDS = ("chat_id", "run_id", "turn_id", "attempt", "interruptions", "failure_class", "task_id")

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"at": record.created, "level": record.levelname, "logger": record.name,
                               "message": record.getMessage(), "process": record.processName}
        for field in self.FIELDS:
            if hasattr(record, field):
                out[field] = getattr(record, field)
        if record.exc_info:
            out["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, default=str)


def install(logger: logging.Logger) -> None:
    from tasks.app import settings

    for handler in logger.handlers or logging.getLogger().handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        if settings.log_json:
            handler.setFormatter(JsonFormatter())


@signals.after_setup_logger.connect
def _setup(logger: logging.Logger, **_: Any) -> None:
    install(logger)


@signals.after_setup_task_logger.connect
def _setup_task(logger: logging.Logger, **_: Any) -> None:
    install(logger)
