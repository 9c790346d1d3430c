"""Three kombu fixes: a guard for a Redis channel used after its broker connection was closed, one Redis client
object per channel for its publishes, and a declaration already made on a connection not bound again to be found so.

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

The declaration: every publish declares its queue, and every event its exchange, "if not already declared" (kombu's
`maybe_declare`, with Celery's retry policy). kombu answers that from the connection's cache of declared entities, but
only after binding a copy of the entity to the channel and wrapping the check in the connection's `ensure`: ~40 µs
a declaration, two a chat turn's send (its task and its task-sent event). The same cache is read first here, and
only an entity it does not hold goes kombu's way; a connection that closes or reconnects empties its cache, so its
next publish declares again, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu import messaging
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


_maybe_declare = messaging.Producer.maybe_declare


def _maybe_declare_unless_cached(self: Any, entity: Any, retry: bool = False, **retry_policy: Any) -> Any:
    # A channel not made yet (a promise) has no connection: kombu makes it.
    connection = getattr(self._channel, "connection", None)
    client = getattr(connection, "client", None)
    declared = getattr(client, "declared_entities", None)
    if entity and declared and entity.can_cache_declaration and hash(entity) in declared:
        return False  # what kombu's `maybe_declare` answers for it, after a bind and an `ensure`
    return _maybe_declare(self, entity, retry, **retry_policy)


def install() -> None:
    """Patch kombu's Redis channel and producer (idempotent); imported with the worker's runtime and by the client."""
    kombu_redis.Channel._connparams = _connparams_of_an_open_connection  # type: ignore[method-assign]
    kombu_redis.Channel.conn_or_acquire = _conn_or_acquire_one_client  # type: ignore[method-assign]
    messaging.Producer.maybe_declare = _maybe_declare_unless_cached  # type: ignore[method-assign]


install()
