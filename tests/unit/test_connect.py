"""The store's client factory: a plain Redis from the URL, or the master the Sentinels name (no connection made)."""

from __future__ import annotations

from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import SentinelConnectionPool

from config.settings import Settings
from tasks.store.connect import new_async_store_client, new_store_client

SENTINEL = Settings(redis_url="redis://:pw@ignored:1/3", redis_sentinels="127.0.0.1:1,127.0.0.1:2",
                    redis_master="baton")


def test_plain_settings_give_a_plain_client_of_the_url():
    """Without Sentinels the client connects where BATON_REDIS_URL says."""
    client = new_store_client(Settings(redis_url="redis://h:6390/2"))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6390, 2)


def test_sentinel_settings_give_clients_of_the_named_master_with_the_urls_password_and_db():
    """With Sentinels, the sync and async clients ask them for `BATON_REDIS_MASTER`, keeping the URL's password
    and database, and retry connection errors long enough to cross a failover."""
    client = new_store_client(SENTINEL)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "baton"
    assert pool.connection_kwargs["password"] == "pw" and pool.connection_kwargs["db"] == 3
    assert [(s.connection_pool.connection_kwargs["port"]) for s in pool.sentinel_manager.sentinels] == [1, 2]
    assert client.get_retry() is not None and client.get_retry().get_retries() >= 10
    async_client = new_async_store_client(SENTINEL, max_connections=5, timeout=5, socket_timeout=30)
    assert isinstance(async_client.connection_pool, AsyncSentinelPool)
    assert async_client.connection_pool.max_connections == 5
