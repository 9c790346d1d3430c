"""The asyncio client's two pools of the store: one for reads that block, one for every other command.

A blocked XREAD (`stream`, `follow`, the waiters' reader) holds a connection as long as it blocks; past the
pool's size one waits. Every other command takes a connection of a small pool: a burst of sends queues for a few
warm connections instead of opening one each (a connection's setup is a connect and two round trips on the loop;
200 at once held it for tens of milliseconds).
"""

from __future__ import annotations

from typing import cast

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from config.settings import Settings
from tasks.store import keys
from tasks.store.connect import POOL_WAIT_SECONDS, STORE_CONNECT_TIMEOUT, new_async_store_client
from tasks.store.tail import BLOCK_MS

COMMAND_CONNECTIONS = 8  # the short commands' pool: a burst waits for a warm connection rather than opening more


class AsyncPools:
    """`reads` (blocking reads, `max_connections`) and `commands` (`COMMAND_CONNECTIONS`), of one store."""

    def __init__(self, settings: Settings, *, max_connections: int, client_name: str | None) -> None:
        self.reads = new_async_store_client(
            settings,
            max_connections=max_connections,
            timeout=5,
            client_name=client_name,
            # redis-py 8 reads with a 5 s socket timeout by default; a stream's XREAD blocks longer than that.
            socket_timeout=BLOCK_MS / 1000 + 10,
            socket_connect_timeout=STORE_CONNECT_TIMEOUT,
            health_check_interval=30,
        )
        self.commands = new_async_store_client(
            settings,
            max_connections=COMMAND_CONNECTIONS,
            timeout=POOL_WAIT_SECONDS,
            client_name=client_name,
            socket_connect_timeout=STORE_CONNECT_TIMEOUT,
            health_check_interval=30,
        )
        self._slots_learnt = False

    async def learn_slots(self) -> None:
        """On a Redis Cluster, have both clients learn the cluster's slots, once, before any command. redis-py's
        asyncio cluster client learns them on its first command, and 200 first commands at once failed there
        ("Connection closed by server": the startup node's connections closed under the commands waiting on it).
        Nothing to do elsewhere, and nothing once done."""
        if self._slots_learnt or not keys.clustered():
            return
        for store in (self.commands, self.reads):
            await cast(AsyncRedisCluster, store).initialize()
        self._slots_learnt = True

    async def aclose(self) -> None:
        for store in (self.commands, self.reads):
            await store.aclose()
            if not keys.clustered():  # a cluster client's aclose closes its nodes' pools itself
                await store.connection_pool.disconnect()
