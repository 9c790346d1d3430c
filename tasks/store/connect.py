"""Every Redis client Baton builds for its store comes from here: plain Redis, or through Redis Sentinel.

With `BATON_REDIS_SENTINELS` and `BATON_REDIS_MASTER` a client asks the Sentinels for the current master on
each new connection, and a connection that finds the old master gone (or demoted to a read-only replica)
is dropped and made again to the new one: a promotion is followed without a restart. The password and the
database number still come from `BATON_REDIS_URL`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import ExponentialBackoff
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from config.settings import Settings

# Shared by every client: keep TCP connections alive and check an idle one before use.
_DEFAULTS: dict[str, Any] = {"health_check_interval": 30, "socket_keepalive": True}
# Through Sentinel a command may land in a failover: the old master's socket closes, and for a moment the
# Sentinel names the new master while still flagging the failover (redis-py then raises MasterNotFoundError,
# a ConnectionError). Measured here: ~3 s from kill -9 to promotion, then ~0.5 s of that window. Retrying
# connection errors for ~10 s carries a command across it instead of failing the unit.
FAILOVER_RETRIES = 12
FAILOVER_BACKOFF_CAP = 1.0


def _failover_retry() -> Retry:
    return Retry(ExponentialBackoff(cap=FAILOVER_BACKOFF_CAP, base=0.05), FAILOVER_RETRIES)


def _async_failover_retry() -> AsyncRetry:
    return AsyncRetry(ExponentialBackoff(cap=FAILOVER_BACKOFF_CAP, base=0.05), FAILOVER_RETRIES)


def _credentials(url: str) -> dict[str, Any]:
    """What the URL says beyond the address: password, username, database number."""
    parsed = parse_url(url)
    return {k: parsed[k] for k in ("username", "password", "db") if parsed.get(k) is not None}


def new_store_client(settings: Settings, **options: Any) -> redis.Redis:
    """A new client of the store (the caller owns and closes it); `options` as for `redis.Redis`."""
    if not settings.sentinels:
        return redis.Redis.from_url(settings.redis_url, **{**_DEFAULTS, **options})
    sentinel = Sentinel(settings.sentinels, socket_timeout=options.get("socket_timeout", 5),
                        socket_connect_timeout=options.get("socket_connect_timeout", 5))
    kwargs = {**_DEFAULTS, **_credentials(settings.redis_url), "retry": _failover_retry(), **options}
    client: redis.Redis = sentinel.master_for(settings.redis_master or "", redis_class=redis.Redis, **kwargs)
    return client


@lru_cache(maxsize=8)
def _shared(redis_url: str, sentinels: tuple[tuple[str, int], ...], master: str | None) -> redis.Redis:
    settings = Settings(redis_url=redis_url, redis_sentinels=",".join(f"{h}:{p}" for h, p in sentinels),
                        redis_master=master)
    return new_store_client(settings)


def store_client(settings: Settings) -> redis.Redis:
    """The process's pooled client of the store (a forked pool child must call `forget_clients()` first)."""
    return _shared(settings.redis_url, tuple(settings.sentinels), settings.redis_master)


def forget_clients() -> None:
    """Drop the pooled clients (a forked child must not share its parent's sockets)."""
    _shared.cache_clear()


def new_async_store_client(settings: Settings, *, max_connections: int, **options: Any) -> aioredis.Redis:
    """An asyncio client of the store with a bounded pool (one connection per blocked XREAD)."""
    if not settings.sentinels:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=max_connections, **options
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
