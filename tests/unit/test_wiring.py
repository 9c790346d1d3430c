"""What a worker process builds once and reuses: the provider client, the chat tools, the store's pools."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import fakeredis
import pytest
import redis

from config.settings import Settings
from tasks.execution import wiring
from tasks.store import connect

SETTINGS = Settings(redis_url="redis://fake:6379/0", provider="anthropic", tools="bench.tools:TOOLS")


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    wiring._providers.clear()
    yield
    wiring._providers.clear()


def test_one_provider_per_process_and_a_new_one_after_fork():
    """Executions of one process share the provider (one HTTP pool); a forked child builds its own."""
    first = wiring.build_provider(SETTINGS, None)
    assert wiring.build_provider(SETTINGS, None) is first
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side: a pool child after the fork
        os._exit(0 if wiring.build_provider(SETTINGS, None) is not first else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_chat_tools_are_loaded_once_and_read_only():
    """Every turn gets the same tool set, and no turn can change it for the next."""
    tools = wiring.chat_tools(SETTINGS)
    assert wiring.chat_tools(SETTINGS) is tools and list(tools) == ["peek"]
    with pytest.raises(TypeError):
        tools["other"] = tools["peek"]  # type: ignore[index]
    assert "peek" in wiring.run_tools(SETTINGS, "/tmp") and "peek" in wiring.run_tools(SETTINGS, "/tmp")


@pytest.fixture
def sized():
    yield wiring.size_pools
    wiring.size_pools(1)


def test_a_threads_pool_sizes_the_store_pool_for_all_its_units_and_prefork_for_one(sized):
    """A worker's process runs `-c` units on a threads or gevent pool and one on prefork; the store's pool is a
    blocking one sized for that (redis-py's own fails past 100 connections: 73 of 200 turns did)."""
    assert wiring.units_per_process("celery.concurrency.thread", 200) == 200
    assert wiring.units_per_process("celery.concurrency.gevent", 500) == 500
    assert wiring.units_per_process("celery.concurrency.prefork", 16) == 1
    sized(200)
    pool = wiring.store(Settings(redis_url="redis://127.0.0.1:1/0")).connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections >= 2 * 200
    sized(1)
    pool = wiring.store(Settings(redis_url="redis://127.0.0.1:1/0")).connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections < 100


def test_the_worker_sizes_its_pools_from_its_pool_and_concurrency(sized):
    """At `worker_init` the drain module reads the worker's pool and concurrency (the pool still a name then)."""
    from tasks.runtime import drain

    drain.size_connection_pools(SimpleNamespace(concurrency=300, pool_cls="threads"))
    assert connect.pool_size() == 300 * connect.CONNECTIONS_PER_UNIT + connect.SPARE_CONNECTIONS
    drain.size_connection_pools(SimpleNamespace(concurrency=16, pool_cls="prefork"))
    assert connect.pool_size() == connect.CONNECTIONS_PER_UNIT + connect.SPARE_CONNECTIONS


def test_a_full_blocking_pool_waits_for_a_free_connection_instead_of_failing():
    """Past its size the store client waits for a connection another thread gives back (redis-py's default
    pool raises MaxConnectionsError there)."""
    server = fakeredis.FakeServer()
    client = connect.new_store_client(
        Settings(redis_url="redis://127.0.0.1:1/0"), max_connections=1,
        connection_class=fakeredis.FakeRedisConnection, server=server,
        health_check_interval=0,  # a fakeredis 2.41 connection fails redis-py 8.2's health-check PING on connect
    )
    held = client.connection_pool.get_connection()
    threading.Timer(0.2, client.connection_pool.release, args=[held]).start()
    started = time.monotonic()
    assert client.ping()
    assert time.monotonic() - started >= 0.15
    eager = redis.Redis(connection_pool=redis.ConnectionPool(
        max_connections=1, connection_class=fakeredis.FakeRedisConnection, server=server))
    eager.connection_pool.get_connection()
    with pytest.raises(redis.exceptions.MaxConnectionsError):
        eager.ping()


def test_the_sentinel_store_pool_blocks_too():
    """Through Sentinel the shared client's pool is a Sentinel-managed one that blocks when full."""
    sentinel = Settings(redis_url="redis://:pw@ignored:1/3", redis_sentinels="127.0.0.1:1", redis_master="baton")
    pool = connect.new_store_client(sentinel, max_connections=40).connection_pool
    assert isinstance(pool, connect.BlockingSentinelPool) and pool.service_name == "baton"
    assert pool.max_connections == 40
    assert type(pool).get_connection is redis.BlockingConnectionPool.get_connection


def test_a_threads_worker_shares_one_result_backend_between_its_pool_threads(sized, monkeypatch):
    """Celery builds a result backend (a client and a pool) per thread unless told it is thread-safe: at a
    threads pool's hundreds of threads, each paid for its own on its first task."""
    from tasks.app import app
    from tasks.runtime import drain

    monkeypatch.setitem(app.conf, "result_backend_thread_safe", False)
    monkeypatch.setattr(app, "_backend_cache", None)
    drain.size_connection_pools(SimpleNamespace(concurrency=300, pool_cls="threads"))
    seen: list[object] = []
    for _ in range(2):  # one after the other: two first uses at once may each build one (harmless, untested)
        pool_thread = threading.Thread(target=lambda: seen.append(app.backend))
        pool_thread.start()
        pool_thread.join()
    assert seen[0] is seen[1]
