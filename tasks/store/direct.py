"""Calls sent straight on connections held from the client's pool: every registered script's call and the calls of
one round trip (`straight`), and a write sent ahead, its reply read later (`Fence.send_ahead`).

redis-py's client sends a command through its own bookkeeping (the connection's retry wrapper, its events and
observability hooks, its pipeline's stack); on one Redis that cost ~12 µs a script call warm and a turn's worker
~0.05-0.12 ms (`bench.ab_workers`, both ways round, bench/RESULTS.md stop 63). A held connection is what it does
underneath: the command packed, sent, its reply read.

For a write whose reply the caller does not need before its next step, only before its next write: the answer of
a model step that called read tools only is sent, the tools run while the store applies it, and its reply is read
before anything else of the unit is written or sent. The write goes out before the tools start, as a write that
waited for its reply did; a read tool that then finds the lease was lost has run for nothing, which a read tool
allows (the same as a replay running it again).

On a Redis Cluster each call goes on a connection of the master that holds its slot (its keys share one), as the
cluster's client would pick, and the calls of one master go on one connection, pipelined. The cluster's client
routes every call again (the slot of each of its keys, the command's policy, the node), which cost ~45 µs a
script call and ~100 µs more a round trip over three masters than this (bench/RESULTS.md, stop 55).

Where the client has no connection to hold (a single-connection client, a pipeline) nothing is sent (`straight`,
`send` and `hold` return None) and the caller goes the client's way. A reply that says the call did not run there
is answered by running it again through the client, which knows what to do: NOSCRIPT (the server restarted), a
master turned replica (READONLY: a Sentinel failover, or a cluster's), or, on a cluster, a slot that moved or is
moving (MOVED, ASK, TRYAGAIN) or a cluster down. So is a reply that cannot be read (the connection broke), with
the client's retries: what redis-py does for a command whose connection broke, and a call that was never run runs
once. A call whose connection broke as it was sent is run through the client at once, so it is written before the
caller goes on, as when it was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
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

_AGAIN = object()  # a call's reply that says to run it again through the client
_LOAD_AGAIN = object()  # the same, its script loaded first: the server said it lacks it (NOSCRIPT)


@dataclass(frozen=True)
class Call:
    """A command as sent (its first key routes it: `key`), and the same call through the client, for a reply that
    says it did not run where it was sent."""

    command: tuple[Any, ...]
    key: str
    again: Callable[[], Any]
    load: Callable[[], Any] | None = None  # a script's: loads it where the server said it lacks it

    @classmethod
    def script(cls, client: Any, script: Script, keys: list[str], args: list[Any]) -> Call:
        """`script` on `keys` with `args`, as EVALSHA (again: through `client`, which loads a script the server
        lacks; after a NOSCRIPT it is loaded first, so the call through the client is one EVALSHA, not two)."""
        return cls(
            ("EVALSHA", script.sha, len(keys), *keys, *args), keys[0],
            lambda: Script.__call__(script, keys=keys, args=args, client=client),  # the client's way, not routed
            lambda: client.script_load(script.script),
        )


class _Leg:
    """The calls sent on one connection, in order, and the pool it goes back to."""

    def __init__(self, pool: Any, conn: Any, at: list[int]) -> None:
        self.pool, self.conn, self.at = pool, conn, at


class InFlight:
    """Calls sent, each on a connection held from its server's pool until `replies` (or `drop`). Their replies are
    read once, by whichever of the calls' owners asks first (a write sent ahead and the reads that went with it have
    different readers, on different threads at times): a later `replies` returns the same."""

    def __init__(self, calls: list[Call], legs: list[_Leg], done: dict[int, Any]) -> None:
        self._calls, self._legs, self._done = calls, legs, done
        self._read: list[Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def send(cls, client: Any, calls: list[Call]) -> InFlight | None:
        """Send `calls`, those of one server on one connection, pipelined (None: nothing sent, `client` holds a single
        connection or, on a cluster, has no slot map to go by). `client` is Any: a cluster's comes typed as
        `redis.Redis` (tasks/store/connect.py)."""
        pools: dict[int, tuple[Any, list[int]]] = {}
        for i, call in enumerate(calls):
            pool = _pool(client, call.key)
            if pool is None:
                return None
            pools.setdefault(id(pool), (pool, []))[1].append(i)
        legs: list[_Leg] = []
        done: dict[int, Any] = {}
        try:
            for pool, at in pools.values():
                conn = None
                try:
                    conn = pool.get_connection()  # connects a new one: a master that is gone fails here
                    conn.send_packed_command(conn.pack_commands([calls[i].command for i in at]))
                except (redis.ConnectionError, redis.TimeoutError):
                    if conn is not None:
                        conn.disconnect()
                        pool.release(conn)
                    for i in at:  # not known to be sent: through the client now, with its retries
                        done[i] = _again(calls[i])
                    continue
                except BaseException:
                    if conn is not None:
                        conn.disconnect()  # whatever went out is unread: it must not serve another command
                        pool.release(conn)
                    raise
                legs.append(_Leg(pool, conn, at))
        except BaseException:
            cls(calls, legs, done).drop()
            raise
        return cls(calls, legs, done)

    def replies(self) -> list[Any]:
        """Every call's reply, in the order sent; an error reply is returned as its exception, not raised. The
        connections go back to their pools."""
        with self._lock:
            if self._read is None:
                self._read = self._replies()
            return self._read

    def _replies(self) -> list[Any]:
        out = dict(self._done)
        legs, self._legs = self._legs, []
        try:
            while legs:
                leg = legs[0]
                for n, i in enumerate(leg.at):
                    try:
                        out[i] = _read(leg.conn)  # one that did not run here runs again below, the connection back
                    except (redis.ConnectionError, redis.TimeoutError):
                        leg.conn.disconnect()
                        out.update((j, _AGAIN) for j in leg.at[n:])  # unknown whether they ran: as redis-py retries
                        break
                leg.pool.release(leg.conn)
                legs.pop(0)
        except BaseException:
            InFlight(self._calls, legs, {}).drop()
            raise
        return [_answered(call, out[i]) for i, call in enumerate(self._calls)]

    def drop(self) -> None:
        """Give the connections back without reading the replies (the execution ends): closed, so no later command
        reads these replies as its own."""
        with self._lock:
            legs, self._legs = self._legs, []
            for leg in legs:
                leg.conn.disconnect()
                leg.pool.release(leg.conn)


class StraightScript(Script):
    """A registered script whose calls go straight on a connection held from the client's pool (on a cluster, the pool
    of the master of their keys' slot): see the module. A call with no keys goes the client's way."""

    def __call__(self, keys: Any = (), args: Any = (), client: Any = None) -> Any:
        target = self.registered_client if client is None else client
        direct = straight(target, [Call.script(target, self, list(keys), list(args))]) if keys else None
        return super().__call__(keys=keys, args=args, client=client) if direct is None else raised(direct[0])


class SentAhead:
    """One script call in flight (see the module): alone, or the first of calls sent together."""

    def __init__(self, sent: InFlight) -> None:
        self._sent = sent

    @classmethod
    def hold(cls, client: Any, script: Script, keys: list[str], args: list[Any]) -> SentAhead | None:
        """Send `script` with `keys` and `args` on a connection held from `client`'s pool, or on a cluster from the
        pool of the master that holds the slot of `keys` (None: nothing sent, there is no pool of connections to
        hold one from)."""
        sent = InFlight.send(client, [Call.script(client, script, keys, args)])
        return None if sent is None else cls(sent)

    def reply(self) -> Any:
        """The call's reply; the connection goes back to the pool (an error reply is raised)."""
        return raised(self._sent.replies()[0])

    def drop(self) -> None:
        self._sent.drop()


def raised(reply: Any) -> Any:
    """A reply of `on_masters`, an error reply raised."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def routed(client: Any) -> bool:
    """Whether `client` is a cluster's, whose calls `straight` sends to their slots' masters."""
    return isinstance(client, RedisCluster)


def straight(client: Any, calls: list[Call]) -> list[Any] | None:
    """`calls` sent straight on connections held from `client`'s pool (on a cluster, to their slots' masters) in one
    round trip, and their replies (an error reply as its exception); None where nothing could be sent (a client of
    one connection, a pipeline, a cluster with no slot map to go by): the caller goes the client's way."""
    if len(calls) == 1:
        pool = _pool(client, calls[0].key)
        return None if pool is None else [_one(pool, calls[0])]
    sent = InFlight.send(client, calls)
    return None if sent is None else sent.replies()


def in_one_trip(client: Any, calls: list[Call]) -> list[Any]:
    """`calls`, each on its own keys (slots), in one round trip: their replies in order, an error reply as its
    exception. Straight on held connections (`straight`); where there are none, one pipeline of the commands as they
    are (not scripts: redis-py's pipeline asks SCRIPT EXISTS before it sends any, a round trip of its own), where a
    call the server could not run (NOSCRIPT: a restarted server) runs again through the client, which loads it."""
    direct = straight(client, calls)
    if direct is not None:
        return direct
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*call.command)
    replies = pipe.execute(raise_on_error=False)
    return [_again(call, load=True) if isinstance(reply, NoScriptError) else reply
            for call, reply in zip(calls, replies, strict=True)]


def _one(pool: Any, call: Call) -> Any:
    """One call sent and its reply read on a connection of `pool`, answered as `InFlight` answers each of its calls:
    most round trips carry one call, and `InFlight`'s bookkeeping for several cost one ~10 µs more (warm)."""
    conn = None
    try:
        conn = pool.get_connection()
        conn.send_command(*call.command)
        reply = _read(conn)
    except (redis.ConnectionError, redis.TimeoutError):  # unknown whether it ran: as redis-py retries
        if conn is not None:
            conn.disconnect()
            pool.release(conn)
        return _again(call)
    except BaseException:
        if conn is not None:
            conn.disconnect()  # whatever went out is unread: it must not serve another command
            pool.release(conn)
        raise
    pool.release(conn)
    return _answered(call, reply)


def _read(conn: Any) -> Any:
    """A reply read whole from `conn` (which stays clean): the reply, an error reply as its exception, or `_AGAIN` /
    `_LOAD_AGAIN` where the reply says the call did not run there. A broken connection raises."""
    try:
        return conn.read_response()
    except NoScriptError:
        return _LOAD_AGAIN
    except NOT_RUN_HERE:
        return _AGAIN
    except redis.ResponseError as err:
        return err


def _answered(call: Call, reply: Any) -> Any:
    """`reply`, or, where it says the call did not run there, the call run again through the client."""
    if reply is _AGAIN or reply is _LOAD_AGAIN:
        return _again(call, load=reply is _LOAD_AGAIN)
    return reply


def _again(call: Call, *, load: bool = False) -> Any:
    """The call through the client; its error reply as a value, as `InFlight.replies` returns one. `load`: the server
    said it lacks the call's script, which is loaded first."""
    try:
        if load and call.load is not None:
            call.load()
        return call.again()
    except redis.RedisError as err:
        return err


def _pool(client: Any, key: str) -> Any:
    """The pool a call on `key` takes its connection from; None for a client that holds one connection only."""
    if routed(client):
        try:
            client = client.get_redis_connection(client.get_node_from_key(key))
        except (redis.RedisError, RedisClusterException):  # no slot map to go by (a slot not covered): the client's way
            return None
    if getattr(client, "connection", None) is not None or isinstance(client, (Pipeline, ClusterPipeline)):
        return None  # one connection; or a pipeline, whose calls are queued, not sent
    return getattr(client, "connection_pool", None)
