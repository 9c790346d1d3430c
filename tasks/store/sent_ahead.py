"""A script call sent now and its reply read later, on a connection held in between (`Fence.send_ahead`).

For a write whose reply the caller does not need before its next step, only before its next write: the answer of
a model step that called read tools only is sent, the tools run while the store applies it, and its reply is read
before anything else of the unit is written or sent. The write goes out before the tools start, as a write that
waited for its reply did; a read tool that then finds the lease was lost has run for nothing, which a read tool
allows (the same as a replay running it again).

On a Redis Cluster the connection is one of the master that holds the write's slot (its keys share one), as the
cluster's client would pick. Where the client has no connection to hold (a single-connection client) nothing is
sent ahead (`hold` returns None) and the caller writes as usual. A reply that says the call did not run there is
answered by running it again through the client, which knows what to do: NOSCRIPT (the server restarted), or, on
a cluster, a slot that moved or is moving (MOVED, ASK, TRYAGAIN), a cluster down, or a master turned replica
(READONLY). So is a reply that cannot be read (the connection broke), with the client's retries: what redis-py
does for a command whose connection broke, and a script that was never run runs once.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

# Replies that say the call did not run on the server that sent them (MovedError is an AskError).
NOT_RUN_HERE = (NoScriptError, AskError, TryAgainError, ClusterDownError, ReadOnlyError)


class SentAhead:
    """One script call in flight on a connection of a pool (the client's, or on a cluster its slot master's), taken
    out of the pool until `reply`."""

    def __init__(self, script: Script, pool: Any, conn: Any, keys: list[str], args: list[Any]) -> None:
        self._script, self._pool, self._conn, self._keys, self._args = script, pool, conn, keys, args

    @classmethod
    def hold(cls, client: Any, script: Script, keys: list[str], args: list[Any]) -> SentAhead | None:
        """Send `script` with `keys` and `args` on a connection held from `client`'s pool, or on a cluster from the
        pool of the master that holds the slot of `keys` (None: nothing sent, there is no pool of connections to
        hold one from). `client` is Any: a cluster's comes typed as `redis.Redis` (tasks/store/connect.py)."""
        pool = _pool(client, keys[0])
        if pool is None:
            return None
        conn = pool.get_connection()
        try:
            conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            pool.release(conn)
            return None  # not known to be sent: the caller writes as usual, with the client's retries
        except BaseException:
            conn.disconnect()  # whatever went out is unread: the connection must not serve another command
            pool.release(conn)
            raise
        return cls(script, pool, conn, keys, args)

    def reply(self) -> Any:
        """The call's reply; the connection goes back to the pool (an error reply is raised)."""
        pool, conn = self._pool, self._conn
        try:
            reply = conn.read_response()
        except NOT_RUN_HERE:
            pool.release(conn)  # an error reply was read whole: the connection is clean
            return self._script(keys=self._keys, args=self._args)  # it never ran: through the client, which knows
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            pool.release(conn)
            return self._script(keys=self._keys, args=self._args)
        except redis.ResponseError:
            pool.release(conn)  # an error reply was read whole: the connection is clean
            raise
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        return reply

    def drop(self) -> None:
        """Give the connection back without reading the reply (the execution ends): closed, so no later command
        reads this reply as its own."""
        self._conn.disconnect()
        self._pool.release(self._conn)


def _pool(client: Any, key: str) -> Any:
    """The pool a call on `key` takes its connection from; None for a client that holds one connection only."""
    if isinstance(client, RedisCluster):
        try:
            client = client.get_redis_connection(client.get_node_from_key(key))
        except (redis.RedisError, RedisClusterException):  # no slot map to go by (a slot not covered): the client's way
            return None
    if getattr(client, "connection", None) is not None:
        return None
    return getattr(client, "connection_pool", None)
