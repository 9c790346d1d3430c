"""A script call sent now and its reply read later, on a connection held in between (`Fence.send_ahead`).

For a write whose reply the caller does not need before its next step, only before its next write: the answer of
a model step that called read tools only is sent, the tools run while the store applies it, and its reply is read
before anything else of the unit is written or sent. The write goes out before the tools start, as a write that
waited for its reply did; a read tool that then finds the lease was lost has run for nothing, which a read tool
allows (the same as a replay running it again).

Where the client has no connection to hold (a cluster's client routes each command itself) nothing is sent ahead
(`hold` returns None) and the caller writes as usual. A reply that cannot be read (the connection broke) or says
the server lacks the script (NOSCRIPT: restarted) is answered by running the call again through the client, with
its retries: what redis-py does for a command whose connection broke, and a script that was never run runs once.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError


class SentAhead:
    """One script call in flight on a connection of the client's pool, taken out of the pool until `reply`."""

    def __init__(self, client: redis.Redis, conn: Any, script: Script, keys: list[str], args: list[Any]) -> None:
        self._client, self._conn, self._script, self._keys, self._args = client, conn, script, keys, args

    @classmethod
    def hold(cls, client: Any, script: Script, keys: list[str], args: list[Any]) -> SentAhead | None:
        """Send `script` with `keys` and `args` on a connection of `client`'s own (None: nothing sent, the client
        has no pool of connections to hold one from). `client` is Any: a cluster's comes typed as `redis.Redis`
        (tasks/store/connect.py)."""
        pool = None if isinstance(client, RedisCluster) else getattr(client, "connection_pool", None)
        if pool is None or getattr(client, "connection", None) is not None:  # a cluster; a single-connection client
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
        return cls(client, conn, script, keys, args)

    def reply(self) -> Any:
        """The call's reply; the connection goes back to the pool (an error reply is raised)."""
        pool, conn = self._client.connection_pool, self._conn
        try:
            reply = conn.read_response()
        except NoScriptError:
            pool.release(conn)
            return self._script(keys=self._keys, args=self._args)  # it never ran: run it now, which loads it
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
        self._client.connection_pool.release(self._conn)
