"""What an entry point says when the store or the broker cannot be reached: one exception, one sentence.

The client raises `Unavailable` instead of redis-py's or kombu's connection errors, so the CLI can print a line
and exit 1, and the HTTP API can answer 503, without either knowing a transport. URLs are shown with their
password masked: the sentence goes to terminals and logs.
"""

from __future__ import annotations

from typing import Literal

import redis
from amqp.exceptions import IrrecoverableChannelError
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url
from redis.exceptions import ClusterDownError, TryAgainError

from config.settings import Settings

Part = Literal["store", "broker"]

# What a failed publish raises: Celery reraises the transports' errors as kombu's OperationalError, but a
# Redis broker can surface redis-py's own, and a socket error can escape before kombu wraps it.
BROKER_ERRORS: tuple[type[BaseException], ...] = (OperationalError, redis.ConnectionError, redis.TimeoutError, OSError)
# What a broker that is up answers when it will not take a message: RabbitMQ's refusals of a publish's declaration
# (406 PRECONDITION_FAILED, a queue declared another way; 403, 404, 405), which no retry changes.
BROKER_REFUSALS: tuple[type[BaseException], ...] = (IrrecoverableChannelError,)
# A cluster that lost a master answers CLUSTERDOWN (and TRYAGAIN while a slot moves) until the node is back or
# replaced: an outage of the store like a refused connection, not a bug.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, ClusterDownError, TryAgainError,
)


def store_address(settings: Settings) -> str:
    if settings.sentinels:
        names = ",".join(f"{host}:{port}" for host, port in settings.sentinels)
        return f"master {settings.redis_master!r} via the Sentinels at {names}"
    return str(maybe_sanitize_url(settings.redis_url))


def broker_address(settings: Settings) -> str:
    return store_address(settings) if settings.broker == settings.result_backend else str(
        maybe_sanitize_url(settings.broker)
    )


def label(part: Part, settings: Settings) -> str:
    if part == "store":
        return "the store (Redis)"
    return "the broker (RabbitMQ)" if settings.broker.startswith(("amqp", "pyamqp")) else "the broker (Redis)"


def _reason(err: BaseException) -> str:
    # Celery's OperationalError wraps the socket error; its own text is that error's, so either reads well.
    text = str(err).strip().rstrip(".") or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


class Unavailable(ConnectionError):
    """The store or the broker could not be reached, or the broker refused what was sent (`BROKER_REFUSALS`); `part`
    says which, the message where."""

    def __init__(self, part: Part, settings: Settings, err: BaseException, *, consequence: str = "") -> None:
        self.part = part
        self.label = label(part, settings)
        address = store_address(settings) if part == "store" else broker_address(settings)
        if isinstance(err, BROKER_REFUSALS):
            sentence = f"{self.label} at {address} refused it: {_reason(err)}"
        else:
            sentence = f"cannot reach {self.label} at {address}: {_reason(err)}"
        super().__init__(f"{sentence}; {consequence}" if consequence else sentence)
