"""Two kombu fixes: a guard for a Redis channel used after its broker connection was closed, and one Redis
client object per channel for its publishes.

The guard (worker-side):

When the Redis broker goes away (a restart, or a Sentinel failover), Celery's consumer closes its connection;
closing the channel then restores (or acknowledges) the messages it still held, and kombu's Redis channel
rebuilds its pool from a connection that is already gone: `AttributeError: 'NoneType' object has no
attribute 'hostname'`. That is not one of the transport's connection errors, so it escapes the consumer's
`ignore_errors`: Celery logs "Unrecoverable error" and the worker stops consuming (issue #18 saw it on a
Redis restart; a failover does it every time). Raised as the connection error it is, the consumer ignores
it and reconnects. Nothing is lost: those messages stay in kombu's unacked hash and come back after the
visibility timeout, where the unit's finished record or lease turns a needless copy away.

The client object: kombu's Redis channel builds a new `redis.Redis` around its connection pool for every publish,
event and ack (`conn_or_acquire`), and each one copies redis-py's ~170 response callbacks into a case-insensitive
dict: two per chat turn in the client (its publish and task-sent event), more in a worker. Such an object holds no
connection and no state of its own (the pool does; `close()` leaves a pool it was given alone), and it is safe to
share between threads, so one per channel and pool serves them all; a channel whose pool is rebuilt (after a
disconnect) gets a new one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_connparams = kombu_redis.Channel._connparams


def _connparams_of_an_open_connection(self: Any, asynchronous: bool = False) -> Any:
    if getattr(self.connection, "client", None) is None:
        raise redis.exceptions.ConnectionError("the broker connection is closed")
    return _connparams(self, asynchronous)


@contextmanager
def _conn_or_acquire_one_client(self: Any, client: Any = None) -> Iterator[Any]:
    if client:
        yield client
        return
    pool = self.pool
    shared = self.__dict__.get("_baton_client")
    if shared is None or shared.connection_pool is not pool:
        shared = self._baton_client = self._create_client()
    yield shared


def install() -> None:
    """Patch kombu's Redis channel (idempotent); imported with the worker's runtime and by the client."""
    kombu_redis.Channel._connparams = _connparams_of_an_open_connection  # type: ignore[method-assign]
    kombu_redis.Channel.conn_or_acquire = _conn_or_acquire_one_client  # type: ignore[method-assign]


install()
