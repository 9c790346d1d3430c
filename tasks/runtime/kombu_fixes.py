"""A worker-side guard for one kombu failure: a Redis channel used after its broker connection was closed.

When the Redis broker goes away (a restart, or a Sentinel failover), Celery's consumer closes its connection;
closing the channel then restores (or acknowledges) the messages it still held, and kombu's Redis channel
rebuilds its pool from a connection that is already gone: `AttributeError: 'NoneType' object has no
attribute 'hostname'`. That is not one of the transport's connection errors, so it escapes the consumer's
`ignore_errors`: Celery logs "Unrecoverable error" and the worker stops consuming (issue #18 saw it on a
Redis restart; a failover does it every time). Raised as the connection error it is, the consumer ignores
it and reconnects. Nothing is lost: those messages stay in kombu's unacked hash and come back after the
visibility timeout, where the unit's finished record or lease turns a needless copy away.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_connparams = kombu_redis.Channel._connparams


def _connparams_of_an_open_connection(self: Any, asynchronous: bool = False) -> Any:
    if getattr(self.connection, "client", None) is None:
        raise redis.exceptions.ConnectionError("the broker connection is closed")
    return _connparams(self, asynchronous)


def install() -> None:
    """Patch kombu's Redis channel (idempotent); imported with the worker's runtime."""
    kombu_redis.Channel._connparams = _connparams_of_an_open_connection  # type: ignore[method-assign]


install()
