"""Every Redis client Baton builds for its store comes from here: plain Redis, or through Redis Sentinel.

With `BATON_REDIS_SENTINELS` and `BATON_REDIS_MASTER` a client asks the Sentinels for the current master on
each new connection, and a connection that finds the old master gone (or demoted to a read-only replica)
is dropped and made again to the new one: a promotion is followed without a restart. The password and the
database number still come from `BATON_REDIS_URL`.

With `BATON_REDIS_CLUSTER` a client is redis-py's `RedisCluster`: it learns the slots from the startup nodes,
follows `MOVED` and `ASK`, and after a connection error to a node asks the cluster for its slots again (a
restarted master, a promoted replica), retrying for the same ~10 s as through Sentinel. Building one also lays
the process's keys out for the cluster (`keys.use_cluster`): sharded indexes, a unit's keys on its shard's slot.

The process's shared client (`store_client`) has a blocking connection pool sized for the units the process
runs at once (`size_pool`, from the worker's pool and concurrency): past its size a command waits for a free
connection instead of failing. redis-py's own pool fails past 100 connections ("Too many connections"), which a
threads pool of 200 units reached.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.driver_info import DriverInfo, resolve_driver_info
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from config.settings import Settings
from tasks.store import keys
from tasks.store.packing import PACKER, PackedConnection, PackedSSLConnection, async_connection_class

# A client that cannot reach the store says so within seconds instead of waiting on the kernel's connect timeout.
STORE_CONNECT_TIMEOUT = 5.0

# Shared by every client: keep TCP connections alive, check an idle one before use, and pack commands in one
# hiredis call (tasks/store/packing.py).
CLIENT_DEFAULTS: dict[str, Any] = {"health_check_interval": 30, "socket_keepalive": True, "command_packer": PACKER}
# Through Sentinel a command may land in a failover: the old master's socket closes, and for a moment the
# Sentinel names the new master while still flagging the failover (redis-py then raises MasterNotFoundError,
# a ConnectionError). Measured here: ~3 s from kill -9 to promotion, then ~0.5 s of that window. Retrying
# connection errors for ~10 s carries a command across it instead of failing the unit.
FAILOVER_RETRIES = 12
FAILOVER_BACKOFF_CAP = 1.0
# A running unit holds at most two connections at once: its own thread's command and its live text's flush (the
# poller's beat is one for the whole process). The spare covers the process's own threads (poller, sweeper).
CONNECTIONS_PER_UNIT = 2
SPARE_CONNECTIONS = 16
# How long a command waits for a free connection of a full pool before it fails as a connection error.
POOL_WAIT_SECONDS = 20
_units = [1]  # units this process runs at once; a worker sets it before its first client (`size_pool`)


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """A Sentinel-managed pool that waits for a free connection when full (redis-py ships no such class)."""


def size_pool(units: int) -> None:
    """Size the shared clients' pools for `units` executions at once in this process (drops built clients)."""
    _units[0] = max(1, units)
    forget_clients()


def pool_size() -> int:
    """The most connections the process's shared store client opens."""
    return _units[0] * CONNECTIONS_PER_UNIT + SPARE_CONNECTIONS


def _failover_retry() -> Retry:
    return Retry(ExponentialBackoff(cap=FAILOVER_BACKOFF_CAP, base=0.05), FAILOVER_RETRIES)


def _async_failover_retry() -> AsyncRetry:
    return AsyncRetry(ExponentialBackoff(cap=FAILOVER_BACKOFF_CAP, base=0.05), FAILOVER_RETRIES)


def _credentials(url: str) -> dict[str, Any]:
    """What the URL says beyond the address: password, username, database number."""
    parsed = parse_url(url)
    return {k: parsed[k] for k in ("username", "password", "db") if parsed.get(k) is not None}


def _cluster_options(settings: Settings) -> dict[str, Any]:
    """What `BATON_REDIS_URL` adds to a cluster's startup nodes: credentials and TLS (a cluster has database 0 only)."""
    options = {k: v for k, v in _credentials(settings.redis_url).items() if k != "db"}
    if settings.redis_url.startswith("rediss://"):
        options["ssl"] = True
    return options


def new_store_client(settings: Settings, *, max_connections: int | None = None, **options: Any) -> redis.Redis:
    """A new client of the store (the caller owns and closes it); `options` as for `redis.Redis`.

    With `max_connections` its pool is a blocking one of that size: a command waits for a free connection (up to
    `POOL_WAIT_SECONDS`) rather than failing. On a cluster that is the size of each node's pool.
    """
    keys.use_cluster(bool(settings.cluster))
    if settings.cluster:
        kwargs: dict[str, Any] = {"socket_keepalive": True, **_cluster_options(settings), **options}
        # Each node's pool builds this class, which packs as the other clients do (CLIENT_DEFAULTS).
        kwargs["connection_class"] = PackedSSLConnection if kwargs.get("ssl") else PackedConnection
        if max_connections is not None:
            # Its wait for a free connection is the pool's default, 20 s (= POOL_WAIT_SECONDS): RedisCluster hands
            # every option to each node's client too, which takes no `timeout`.
            kwargs.update(connection_pool_class=redis.BlockingConnectionPool, max_connections=max_connections)
        try:
            cluster = RedisCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in settings.cluster], retry=_failover_retry(),
                **kwargs,
            )
        except RedisClusterException as err:
            # redis-py asks the startup nodes for the slots as it builds the client; none answering is an outage
            # of the store (the sweeps and the client's callers wait it out), not a bug. Nothing is cached.
            if "cannot be connected" in str(err):
                raise redis.ConnectionError(f"no startup node of the cluster answered: {err}") from err
            raise
        # Typed as the plain client Baton's store code is written against: RedisCluster has the same commands,
        # pipelines and scripts for keys of one slot, which is all a unit's writes touch (tasks/store/keys.py).
        return cast(redis.Redis, cluster)
    if not settings.sentinels:
        if max_connections is None:
            return redis.Redis.from_url(settings.redis_url, **{**CLIENT_DEFAULTS, **options})
        pool = redis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=max_connections, timeout=POOL_WAIT_SECONDS,
            **{**CLIENT_DEFAULTS, **options},
        )
        return redis.Redis(connection_pool=pool)
    sentinel = Sentinel(settings.sentinels, socket_timeout=options.get("socket_timeout", 5),
                        socket_connect_timeout=options.get("socket_connect_timeout", 5))
    kwargs = {**CLIENT_DEFAULTS, **_credentials(settings.redis_url), "retry": _failover_retry(), **options}
    if max_connections is not None:
        kwargs.update(connection_pool_class=BlockingSentinelPool, max_connections=max_connections,
                      timeout=POOL_WAIT_SECONDS)
    client: redis.Redis = sentinel.master_for(settings.redis_master or "", redis_class=redis.Redis, **kwargs)
    return client


@lru_cache(maxsize=8)
def _shared(
    redis_url: str, sentinels: tuple[tuple[str, int], ...], master: str | None, cluster: tuple[tuple[str, int], ...],
    broker_url: str | None,
) -> redis.Redis:
    settings = Settings(redis_url=redis_url, redis_sentinels=",".join(f"{h}:{p}" for h, p in sentinels),
                        redis_master=master, redis_cluster=",".join(f"{h}:{p}" for h, p in cluster),
                        broker_url=broker_url)
    return new_store_client(settings, max_connections=pool_size())


def store_client(settings: Settings) -> redis.Redis:
    """The process's pooled client of the store (a forked pool child must call `forget_clients()` first)."""
    keys.use_cluster(bool(settings.cluster))  # a cached client was built under another process's layout call
    return _shared(settings.redis_url, tuple(settings.sentinels), settings.redis_master, tuple(settings.cluster),
                   settings.broker_url)


def forget_clients() -> None:
    """Drop the pooled clients (a forked child must not share its parent's sockets)."""
    _shared.cache_clear()


@lru_cache(maxsize=1)
def _driver_info() -> DriverInfo | None:
    """redis-py's CLIENT SETINFO name and version, looked up once. redis-py resolves it again for every new
    connection (a package-metadata lookup, ~1 ms): 200 connections opened at once by an asyncio app held its
    loop for ~250 ms, all of it in that lookup."""
    return resolve_driver_info()


def new_async_store_client(settings: Settings, *, max_connections: int, **options: Any) -> aioredis.Redis:
    """An asyncio client of the store with a bounded pool (one connection per blocked XREAD)."""
    options = {"driver_info": _driver_info(), **options}
    keys.use_cluster(bool(settings.cluster))
    if settings.cluster:
        options.pop("timeout", None)
        # redis-py's asyncio cluster client has no blocking pool: past max_connections a node's request fails
        # (MaxConnectionsError) instead of waiting for a free connection. A small pool meant to make a burst queue
        # (the async client's commands) would fail the burst, so every pool here may grow to the API's bound.
        cluster = AsyncRedisCluster(
            startup_nodes=[AsyncClusterNode(host, port) for host, port in settings.cluster],
            max_connections=max(max_connections, settings.api_redis_connections), retry=_async_failover_retry(),
            **_cluster_options(settings), **options,
        )
        return cast(aioredis.Redis, cluster)
    if not settings.sentinels:
        packed = async_connection_class(settings.redis_url)  # packs as the other clients do (tasks/store/packing.py)
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=max_connections, connection_class=packed, **options
        )
        return aioredis.Redis(connection_pool=pool)
    sentinel = AsyncSentinel(settings.sentinels, socket_timeout=5, socket_connect_timeout=5)
    options.pop("timeout", None)  # a BlockingConnectionPool's wait for a free connection; no such thing here
    kwargs = {**_credentials(settings.redis_url), "retry": _async_failover_retry(), **options}
    # The Sentinel-managed pool is not a blocking one: past max_connections a request fails instead of waiting.
    client: aioredis.Redis = sentinel.master_for(
        settings.redis_master or "", redis_class=aioredis.Redis, max_connections=max_connections, **kwargs
    )
    return client
